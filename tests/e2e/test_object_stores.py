"""gs:// and s3:// sources and destinations against real endpoints on 127.0.0.1 (moto's S3
server, the GCS emulator), read back by TensorStore through the same endpoints; a seeded
fault-injecting proxy; and bad destinations refused before any shard is written."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr
from distributed.diagnostics.plugin import SchedulerPlugin

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import StoreError
from shardwright.stores import open_store
from tests.support import volumes
from tests.support.object_store_servers import FaultyProxy, GcsServer, S3Server

pytestmark = [pytest.mark.s3, pytest.mark.gcs]
SMALL = dict(chunk_size=(16, 16, 8), target_shard_bytes=16 * 1024)


def _volume() -> np.ndarray:
    return volumes.noise((21, 38, 45), seed=11, high=200)


def _ts_read(driver: str, kvstore: dict[str, Any]) -> np.ndarray:
    return np.asarray(ts.open({"driver": driver, "kvstore": kvstore}).result().read().result())


def _s3_kv(server: S3Server, bucket: str, path: str) -> dict[str, Any]:
    return {
        "driver": "s3",
        "bucket": bucket,
        "path": path + "/",
        "endpoint": server.endpoint,
        "aws_region": "us-east-1",
    }


def test_local_source_to_s3_precomputed(tmp_path: pathlib.Path, s3: S3Server) -> None:
    vol = _volume()
    np.save(tmp_path / "vol.npy", vol)
    s3.make_bucket("out-pc")
    dest = "s3://out-pc/em"
    manifest = api.convert(
        str(tmp_path / "vol.npy"), dest, progress=False, storage_options=s3.options(), **SMALL
    )
    assert isinstance(manifest, api.Manifest)
    shards = manifest.totals.shards
    assert shards > 1
    # Two PUTs per shard (the shard, its receipt), the lease and its first heartbeat, the job
    # record and `info` (the manifest's own is not in it).
    assert manifest.totals.requests["puts"] == 2 * shards + 4
    got = _ts_read("neuroglancer_precomputed", _s3_kv(s3, "out-pc", "em"))
    np.testing.assert_array_equal(got[..., 0], vol.T)
    report = api.verify(dest, str(tmp_path / "vol.npy"), full=True, storage_options=s3.options())
    assert report.ok, report.summary()


def test_s3_zarr_source_to_gcs_zarr3_and_back(s3: S3Server, gcs: GcsServer) -> None:
    vol = _volume().astype(np.uint16)
    s3.make_bucket("src-zarr")
    store = ts.open(
        {
            "driver": "zarr3",
            "kvstore": _s3_kv(s3, "src-zarr", "raw"),
            "metadata": {
                "shape": list(vol.shape),
                "data_type": "uint16",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 16, 16]}},
            },
            "create": True,
        }
    ).result()
    store.write(vol).result()
    gcs.make_bucket("out-zarr")
    manifest = api.convert(
        "s3://src-zarr/raw",
        "gs://out-zarr/em.zarr",
        progress=False,
        format="zarr3",
        source_storage_options=s3.options(),
        storage_options=gcs.options(),
        **SMALL,
    )
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards > 1
    # TensorStore reads the shard indexes at the shards' ends with suffix ranges; the level
    # array is 0/ under the OME-Zarr group at the destination.
    got = _ts_read("zarr3", {"driver": "gcs", "bucket": "out-zarr", "path": "em.zarr/0/"})
    np.testing.assert_array_equal(got, vol)
    from zarr.storage import FsspecStore  # and zarr-python, through gcsfs

    zstore = FsspecStore.from_url(
        "gs://out-zarr/em.zarr",
        storage_options=gcs.options(gcs.conformant_endpoint),
        read_only=True,
    )
    level = zarr.open_group(zstore, mode="r")["0"]
    assert isinstance(level, zarr.Array)
    np.testing.assert_array_equal(level[...], vol)


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_sharded_gcs_sources(tmp_path: pathlib.Path, gcs: GcsServer, fmt: str) -> None:
    """Our own sharded output in a bucket, read back as a source through ranged reads."""
    vol = _volume()
    np.save(tmp_path / "vol.npy", vol)
    gcs.make_bucket(f"sharded-{fmt}")
    source = f"gs://sharded-{fmt}/em"
    api.convert(
        str(tmp_path / "vol.npy"),
        source,
        progress=False,
        format=fmt,
        storage_options=gcs.options(),
        **SMALL,
    )
    dest = tmp_path / "copy"
    api.convert(
        source,
        str(dest),
        progress=False,
        format="zarr3",
        source_storage_options=gcs.options(gcs.conformant_endpoint),
        **SMALL,
    )
    got = _ts_read("zarr3", {"driver": "file", "path": f"{dest}/0/"})
    np.testing.assert_array_equal(
        got,
        vol.T if fmt == "precomputed" else vol,  # precomputed is x,y,z: zarr3 keeps it
    )


def test_gcs_precomputed_source_to_s3_zarr3(s3: S3Server, gcs: GcsServer) -> None:
    """An unsharded precomputed volume in a GCS bucket (written by TensorStore) as the source."""
    vol = _volume()
    gcs.make_bucket("src-pc")
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "gcs", "bucket": "src-pc", "path": "em/"},
            "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
            "scale_metadata": {
                "size": list(vol.shape[::-1]),
                "resolution": [4, 4, 40],
                "chunk_size": [16, 16, 16],
                "encoding": "raw",
            },
            "create": True,
        }
    ).result()
    store.write(vol.T[..., None]).result()
    s3.make_bucket("out-z3")
    api.convert(
        "gs://src-pc/em",
        "s3://out-z3/em.zarr",
        progress=False,
        format="zarr3",
        source_storage_options=gcs.options(gcs.conformant_endpoint),
        storage_options=s3.options(),
        **SMALL,
    )
    got = _ts_read("zarr3", _s3_kv(s3, "out-z3", "em.zarr/0"))
    # A precomputed source is x,y,z,c: zarr3 keeps its space axes' order, its one channel no axis.
    np.testing.assert_array_equal(got, vol.T)


def test_conversion_through_a_faulty_endpoint_is_exact(
    tmp_path: pathlib.Path, s3: S3Server
) -> None:
    vol = _volume()
    np.save(tmp_path / "vol.npy", vol)
    s3.make_bucket("faulty")
    # What comes after the manifest is spared: its own PUT and the lease's last check and
    # release, whose retries cannot be counted in the manifest itself.
    spare = (MANIFEST_KEY, "/.shardwright/lease-", "/.shardwright/heartbeat-")
    proxy = FaultyProxy(s3.endpoint, fault_rate=0.15, seed=7, spare=spare)
    try:
        options = {"client_kwargs": {"endpoint_url": proxy.endpoint}}
        manifest = api.convert(
            str(tmp_path / "vol.npy"),
            "s3://faulty/em",
            progress=False,
            storage_options=options,
            **SMALL,
        )
    finally:
        proxy.stop()
    assert isinstance(manifest, api.Manifest)
    faults = proxy.counts["503"] + proxy.counts["reset"] + proxy.counts["stall"]
    assert faults >= 0.1 * proxy.counts["requests"], proxy.counts  # at least 10% misbehave
    # Failures reach shardwright's own retry layer (botocore's and s3fs' are off) and each
    # costs one counted retry; only aiohttp may silently resend a request whose reused
    # connection was reset, so resets are counted at most once each.
    retries = manifest.totals.requests.get("retries", 0)
    assert proxy.counts["503"] <= retries <= proxy.counts["503"] + proxy.counts["reset"]
    got = _ts_read("neuroglancer_precomputed", _s3_kv(s3, "faulty", "em"))
    np.testing.assert_array_equal(got[..., 0], vol.T)
    report = api.verify(
        "s3://faulty/em", str(tmp_path / "vol.npy"), full=True, storage_options=s3.options()
    )
    assert report.ok, report.summary()
    stored = json.loads(open_store("s3://faulty/em", s3.options()).read(MANIFEST_KEY))
    assert stored["shards"] == [e.to_json() for e in manifest.shards]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_missing_bucket_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, s3: S3Server, gcs: GcsServer, scheme: str
) -> None:
    np.save(tmp_path / "vol.npy", _volume())
    options = s3.options() if scheme == "s3" else gcs.options()
    with pytest.raises(StoreError, match="bucket does not exist"):
        api.convert(
            str(tmp_path / "vol.npy"),
            f"{scheme}://no-such-bucket/em",
            progress=False,
            storage_options=options,
            **SMALL,
        )


def test_large_shards_upload_in_parts_streamed_from_the_spool(
    tmp_path: pathlib.Path, s3: S3Server
) -> None:
    """A 16 MiB shard with 5 MiB parts and a 4 MiB spool budget: a multipart upload."""
    vol = np.random.default_rng(3).integers(0, 255, (256, 256, 256), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", vol)
    s3.make_bucket("parts")
    proxy = FaultyProxy(s3.endpoint, fault_rate=0.0)
    try:
        options = {
            "client_kwargs": {"endpoint_url": proxy.endpoint},
            "default_block_size": 5 * 2**20,
        }
        manifest = api.convert(
            str(tmp_path / "vol.npy"),
            "s3://parts/em",
            progress=False,
            storage_options=options,
            compression="none",
            min_shards=1,
            memory_budget=16 * 2**20,
            target_shard_bytes=2**30,
        )
    finally:
        proxy.stop()
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards == 1
    uploads = [r for r in proxy.log if "uploadId=" in r and r.startswith("PUT")]
    assert len(uploads) >= 3, proxy.log  # >= 16 MiB / 5 MiB parts
    assert any(r.startswith("POST") and "uploads" in r for r in proxy.log)
    got = _ts_read("neuroglancer_precomputed", _s3_kv(s3, "parts", "em"))
    np.testing.assert_array_equal(got[..., 0], vol.T)


def test_large_gcs_shards_go_up_as_resumable_uploads(
    tmp_path: pathlib.Path, gcs: GcsServer
) -> None:
    """A 16 MiB shard with 5 MiB blocks goes up as one resumable upload session in chunks,
    streamed from the spool (16 MiB budget, spooled past it)."""
    vol = np.random.default_rng(4).integers(0, 255, (256, 256, 256), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", vol)
    gcs.make_bucket("resumable")
    proxy = FaultyProxy(gcs.endpoint, fault_rate=0.0)
    try:
        manifest = api.convert(
            str(tmp_path / "vol.npy"),
            "gs://resumable/em",
            progress=False,
            storage_options=gcs.options(proxy.endpoint) | {"block_size": 5 * 2**20},
            compression="none",
            min_shards=1,
            memory_budget=16 * 2**20,
            target_shard_bytes=2**30,
        )
    finally:
        proxy.stop()
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards == 1
    shard = [r for r in proxy.log if "name=em/1_1_1/" in r and r.startswith("POST")]
    starts = [r for r in shard if "upload_id=" not in r]
    assert len(starts) == 1 and len(shard) - 1 >= 4, shard  # one session, 16 MiB in 5 MiB
    got = _ts_read(
        "neuroglancer_precomputed", {"driver": "gcs", "bucket": "resumable", "path": "em/"}
    )
    np.testing.assert_array_equal(got[..., 0], vol.T)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_fsspec_environment_variables_configure_the_cli(
    tmp_path: pathlib.Path, s3: S3Server, gcs: GcsServer, scheme: str
) -> None:
    """fsspec's FSSPEC_<PROTOCOL>_<OPTION> variables reach the destination's filesystem, so a
    deployment can configure endpoints without --storage-options."""
    vol = _volume()
    np.save(tmp_path / "vol.npy", vol)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSSPEC_")}
    if scheme == "s3":
        s3.make_bucket("from-env")
        env["FSSPEC_S3_ENDPOINT_URL"] = s3.endpoint
        kvstore = _s3_kv(s3, "from-env", "em")
    else:
        gcs.make_bucket("from-env")
        env |= {
            "FSSPEC_GCS_ENDPOINT_URL": gcs.endpoint,
            "FSSPEC_GCS_TOKEN": "anon",
            "FSSPEC_GCS_PROJECT": "test",
        }
        kvstore = {"driver": "gcs", "bucket": "from-env", "path": "em/"}
    subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", str(tmp_path / "vol.npy"),
         f"{scheme}://from-env/em", "--quiet", "--scheduler", "threads", "--chunk-size", "16,16,8"],
        check=True,
        env=env,
        timeout=300,
    )  # fmt: skip
    np.testing.assert_array_equal(_ts_read("neuroglancer_precomputed", kvstore)[..., 0], vol.T)


class _ShownTasks(SchedulerPlugin):
    """Records what the scheduler (and so its dashboard) shows of each task it runs: the key
    and the task with its arguments."""

    name = "shown-tasks"

    def __init__(self) -> None:
        self.shown: list[str] = []

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing":
            self.shown.append(f"{key!r} {self.scheduler.tasks[key].run_spec!r}")


def _tasks_shown_by_the_scheduler(client: Any, job: Callable[[], Any]) -> list[str]:
    client.register_plugin(_ShownTasks())
    try:
        job()
        return client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.plugins[_ShownTasks.name].shown
        )
    finally:
        client.unregister_scheduler_plugin(_ShownTasks.name)


def test_credentials_never_appear_in_errors(
    tmp_path: pathlib.Path, s3: S3Server, client: Any
) -> None:
    np.save(tmp_path / "vol.npy", _volume())
    secret = "sEcReT-kEy-1234567890"
    options = {
        "key": "AKIDEXAMPLE",
        "secret": secret,
        "client_kwargs": {"endpoint_url": s3.endpoint},
    }
    with pytest.raises(StoreError) as info:
        api.convert(
            str(tmp_path / "vol.npy"),
            "s3://absent-bucket/em",
            progress=False,
            storage_options=options,
            **SMALL,
        )
    assert secret not in str(info.value) and "AKIDEXAMPLE" not in str(info.value)
    plan = api.plan(
        str(tmp_path / "vol.npy"), "s3://absent-bucket/em", storage_options=options, **SMALL
    )
    assert secret not in repr(plan) and secret not in json.dumps(plan.describe())
    # A job that runs: what the Dask dashboard shows (task keys and the repr of every task)
    # and the manifest hold no credentials either.
    s3.make_bucket("with-keys")
    shown = _tasks_shown_by_the_scheduler(
        client,
        lambda: api.convert(
            str(tmp_path / "vol.npy"),
            "s3://with-keys/em",
            client=client,
            progress=False,
            storage_options=options,
            **SMALL,
        ),
    )
    assert len(shown) > 2
    assert any("s3://with-keys/em" in task for task in shown)  # arguments shown, keys not:
    assert not any(secret in task or "AKIDEXAMPLE" in task for task in shown)
    manifest = api.convert(
        str(tmp_path / "vol.npy"),
        "s3://with-keys/em",
        progress=False,
        storage_options=options,
        overwrite=True,
        **SMALL,
    )
    text = open_store("s3://with-keys/em", s3.options()).read(MANIFEST_KEY).decode()
    assert isinstance(manifest, api.Manifest) and json.loads(text)["totals"]["shards"] > 1
    assert secret not in text and "AKIDEXAMPLE" not in text


@pytest.mark.parametrize("scheme", ["s3", "gs"])
@pytest.mark.parametrize(
    ("denied", "case"),
    [
        (("GET", "HEAD", "PUT", "POST", "DELETE"), "bad credentials"),
        (("PUT", "POST", "DELETE"), "read-only bucket"),
    ],
)
def test_unwritable_destinations_are_refused_before_any_shard(
    tmp_path: pathlib.Path,
    s3: S3Server,
    gcs: GcsServer,
    denied: tuple[str, ...],
    case: str,
    scheme: str,
) -> None:
    """The endpoint answers 403, as S3 and GCS do for bad keys or a read-only policy."""
    np.save(tmp_path / "vol.npy", _volume())
    server: S3Server | GcsServer = s3 if scheme == "s3" else gcs
    server.make_bucket("guarded")
    proxy = FaultyProxy(server.endpoint, fault_rate=0.0, deny=denied)
    try:
        with pytest.raises(StoreError, match="access denied") as info:
            api.convert(
                str(tmp_path / "vol.npy"),
                f"{scheme}://guarded/em",
                progress=False,
                storage_options=server.options(proxy.endpoint),
                **SMALL,
            )
    finally:
        proxy.stop()
    assert f"{scheme}://guarded/em" in str(info.value), case
    assert open_store(f"{scheme}://guarded/em", server.options()).is_empty()  # nothing was written


def test_gcs_conversion_through_a_faulty_endpoint_is_exact(
    tmp_path: pathlib.Path, gcs: GcsServer
) -> None:
    """gcsfs retries some failures itself (there is no switch to hand them all to us): what
    reaches shardwright is retried and counted, and the data must come out exact either way."""
    vol = _volume()
    np.save(tmp_path / "vol.npy", vol)
    gcs.make_bucket("faulty-gcs")
    proxy = FaultyProxy(gcs.endpoint, fault_rate=0.15, seed=3)
    try:
        manifest = api.convert(
            str(tmp_path / "vol.npy"),
            "gs://faulty-gcs/em",
            progress=False,
            storage_options=gcs.options(proxy.endpoint),
            **SMALL,
        )
    finally:
        proxy.stop()
    assert isinstance(manifest, api.Manifest)
    assert proxy.counts["503"] + proxy.counts["reset"] >= 1, proxy.counts
    report = api.verify(
        "gs://faulty-gcs/em", str(tmp_path / "vol.npy"), full=True, storage_options=gcs.options()
    )
    assert report.ok, report.summary()


def test_meshes_and_skeletons_from_a_faulty_s3_bucket_to_gcs(
    tmp_path: pathlib.Path, s3: S3Server, gcs: GcsServer
) -> None:
    """Segment objects are fetched in concurrent batches; failed fetches in a batch are
    retried one by one, and every key reads back through TensorStore from GCS."""
    import struct

    import s3fs

    from tests.support.segment_objects import segment_ids, write_multilod_meshes, write_skeletons

    ids = segment_ids(160, seed=9)
    write_multilod_meshes(tmp_path / "mesh", ids)
    write_skeletons(tmp_path / "skeletons", ids)
    s3.make_bucket("objects")
    gcs.make_bucket("objects-out")
    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    for kind in ("mesh", "skeletons"):
        fs.put(str(tmp_path / kind) + "/", f"objects/seg/{kind}/", recursive=True)
    proxy = FaultyProxy(s3.endpoint, fault_rate=0.15, seed=3)
    try:
        for kind in ("mesh", "skeletons"):
            manifest = api.convert(
                f"s3://objects/seg/{kind}",
                f"gs://objects-out/seg/{kind}",
                progress=False,
                source_storage_options=s3.options(proxy.endpoint),
                storage_options=gcs.options(),
                target_shard_bytes=32 * 1024,
            )
            assert isinstance(manifest, api.Manifest) and manifest.totals.chunks == ids.size
            assert manifest.totals.requests.get("retries", 0) > 0
            info = json.loads(
                open_store(f"gs://objects-out/seg/{kind}", gcs.options()).read("info")
            )
            kv = ts.KvStore.open(
                {
                    "driver": "neuroglancer_uint64_sharded",
                    "base": {"driver": "gcs", "bucket": "objects-out", "path": f"seg/{kind}/"},
                    "metadata": info["sharding"],
                }
            ).result()
            for segment in ids.tolist()[::20] + [int(ids[-1])]:
                name = f"{segment}.index" if kind == "mesh" else str(segment)
                got = kv.read(struct.pack(">Q", segment)).result().value
                assert got == (tmp_path / kind / name).read_bytes(), (kind, segment)
    finally:
        proxy.stop()
    faults = proxy.counts["503"] + proxy.counts["reset"] + proxy.counts["stall"]
    assert faults >= 0.1 * proxy.counts["requests"], proxy.counts
