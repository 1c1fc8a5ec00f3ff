"""The job lifecycle on object stores: moto's S3 server (real If-None-Match) and the GCS
emulator behind the conformance shim (ifGenerationMatch=0, as GCS does): leases exclusive,
containment by bucket and prefix, overwrite replacing only our dataset; read back by
TensorStore."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import LeaseHeld, PlanError
from shardwright.lifecycle.lease import Lease
from shardwright.stores import Store, open_store
from tests.support import volumes
from tests.support.object_store_servers import GcsServer, S3Server

pytestmark = [pytest.mark.s3, pytest.mark.gcs]
SMALL: dict[str, Any] = dict(chunk_size=(16, 16, 8), target_shard_bytes=8 * 1024)


def _store(scheme: str, s3: S3Server, gcs: GcsServer, bucket: str) -> tuple[str, dict[str, Any]]:
    """A bucket, and the storage options that reach it (GCS through its conformance shim)."""
    if scheme == "s3":
        s3.make_bucket(bucket)
        return f"s3://{bucket}", s3.options()
    gcs.make_bucket(bucket)
    return f"gs://{bucket}", gcs.options(gcs.conformant_endpoint)


def _volume(seed: int) -> np.ndarray:
    return volumes.noise((16, 32, 48), seed, high=250)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_leases_are_exclusive_on_object_stores(scheme: str, s3: S3Server, gcs: GcsServer) -> None:
    root, options = _store(scheme, s3, gcs, f"{scheme}-leases")
    for round_ in range(3):
        store = open_store(f"{root}/round{round_}", options)

        def attempt(i: int, store: Store = store) -> str:
            try:
                Lease(store, job=f"{i:032d}").acquire()
                return "won"
            except LeaseHeld:
                return "refused"

        with ThreadPoolExecutor(6) as pool:
            outcomes = list(pool.map(attempt, range(6)))
        assert outcomes.count("won") == 1, outcomes
        with pytest.raises(FileExistsError):
            store.create_exclusive(".shardwright/lease-000001.json", b"{}")


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_destinations_around_an_object_store_source_are_refused(
    scheme: str, s3: S3Server, gcs: GcsServer, tmp_path: Any
) -> None:
    root, options = _store(scheme, s3, gcs, f"{scheme}-contain")
    vol = _volume(1)
    source = f"{root}/raw.zarr"
    kv = {"driver": "gcs" if scheme == "gs" else "s3", "bucket": root.split("/")[-1],
          "path": "raw.zarr/"}  # fmt: skip
    if scheme == "s3":
        kv.update(endpoint=s3.endpoint, aws_region="us-east-1")
    ts.open({"driver": "zarr3", "kvstore": kv, "create": True, "dtype": "uint8",
             "metadata": {"shape": list(vol.shape)}}).result().write(vol).result()  # fmt: skip
    before = sorted(open_store(root, options).list_keys())
    cases = [
        (source, "is the source"),
        (root, "contains the source"),
        (f"{root}/raw.zarr/out", "lies inside the source"),
    ]
    for dest, why in cases:
        with pytest.raises(PlanError, match=why):
            api.convert(source, dest, progress=False, overwrite=True, storage_options=options,
                        source_storage_options=options, **SMALL)  # fmt: skip
    assert sorted(open_store(root, options).list_keys()) == before
    # A sibling whose name only starts like the source's is not inside it.
    sibling = f"{root}/raw.zarr2"
    manifest = api.convert(source, sibling, progress=False, storage_options=options,
                           source_storage_options=options, **SMALL)  # fmt: skip
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards > 1
    assert api.verify(sibling, source, full=True, storage_options=options,
                      source_storage_options=options).ok  # fmt: skip


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_overwrite_on_an_object_store_replaces_only_our_dataset(
    scheme: str, s3: S3Server, gcs: GcsServer, tmp_path: Any
) -> None:
    root, options = _store(scheme, s3, gcs, f"{scheme}-overwrite")
    a, b = _volume(2), _volume(3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    dest = f"{root}/em"
    store = open_store(dest, options)
    # Someone else's prefix is refused whatever the flags, and left as it was.
    foreign = open_store(f"{root}/theirs", options)
    foreign.write_text("data.bin", "theirs")
    for flags in ({}, {"overwrite": True}, {"resume": True}):
        with pytest.raises(PlanError, match="did not write"):
            api.convert(str(tmp_path / "a.npy"), f"{root}/theirs", progress=False,
                        storage_options=options, **flags, **SMALL)  # fmt: skip
    assert foreign.list_keys() == ["data.bin"]

    api.convert(str(tmp_path / "a.npy"), dest, progress=False, storage_options=options,
                chunk_size=(8, 8, 8), target_shard_bytes=2048)  # fmt: skip
    old = {s["key"] for s in json.loads(store.read(MANIFEST_KEY))["shards"]}
    store.write_text("notes.txt", "the user's")
    manifest = api.convert(str(tmp_path / "b.npy"), dest, progress=False, overwrite=True,
                           storage_options=options, **SMALL)  # fmt: skip
    assert isinstance(manifest, api.Manifest)
    new = {s.key for s in manifest.shards}
    assert old - new
    keys = set(store.list_keys())
    assert not (old - new) & keys  # the old dataset's stale shards are gone
    assert new | {"info", MANIFEST_KEY, "notes.txt"} <= keys
    assert not [k for k in keys if "lease" in k or "retired" in k or "heartbeat" in k]
    assert store.read("notes.txt") == b"the user's"
    assert api.verify(dest, str(tmp_path / "b.npy"), full=True, storage_options=options).ok
    kv: dict[str, Any] = {"driver": "gcs" if scheme == "gs" else "s3",
                          "bucket": root.split("/")[-1], "path": "em/"}  # fmt: skip
    if scheme == "s3":
        kv.update(endpoint=s3.endpoint, aws_region="us-east-1")
    got = ts.open({"driver": "neuroglancer_precomputed", "kvstore": kv}).result().read().result()
    np.testing.assert_array_equal(np.asarray(got)[..., 0], b.T)
