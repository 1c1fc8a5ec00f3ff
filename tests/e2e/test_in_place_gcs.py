"""Meshes and skeletons added to a CloudVolume segmentation in a GCS bucket (the emulator,
behind its conformance shim, which honours `ifGenerationMatch` as GCS does): read there and
written there, the info replaced last in one write conditional on the generation the plan
looked up, so a change in between (even one that rewrote the same bytes) is refused and the
person's info stands; `--resume` then names what was added in the info as it is now."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from shardwright import api
from shardwright.errors import DestinationError
from shardwright.stores import open_store
from shardwright.stores.fsspec_store import FsspecStore
from tests.support import existing_datasets, label_shapes

# Imported here, at collection, as in every GCS test: it sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT
# to false before anything imports gcsfs (the emulator has no zonal buckets to ask about).
from tests.support.object_store_servers import GcsServer

pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")
pytest.importorskip("cloudvolume")

pytestmark = [pytest.mark.gcs]

ADDITION: dict[str, Any] = {
    "generate_meshes": True,
    "generate_skeletons": True,
    "mesh_block": (32, 32, 32),
    "scheduler": "sync",
    "progress": False,
}


def _generation(url: str, options: dict[str, Any], key: str) -> str:
    """The object's generation as gcsfs reports it."""
    store = open_store(url, options)
    assert isinstance(store, FsspecStore)
    return str(store.filesystem().info(store.path(key))["generation"])


def test_added_in_gcs(tmp_path: pathlib.Path, gcs: GcsServer) -> None:
    gcs.make_bucket("lab")
    options = gcs.options(gcs.conformant_endpoint)
    url = "gs://lab/seg"
    written = label_shapes.write_precomputed(tmp_path / "cloudvolume")
    bucket = existing_datasets.copied(written, url, dest_options=options)
    before = existing_datasets.object_crc32cs(url, options)
    info_bytes = bucket.read("info")
    info_before = json.loads(info_bytes)

    # Rewritten with the same bytes after the plan looked it up: only its generation tells,
    # and the info's write, conditional on it, is refused.
    pending = api.convert(url, storage_options=options, compute=False, **ADDITION)
    assert isinstance(pending, api.PendingConversion)
    bucket.write_object("info", info_bytes)
    rewritten = _generation(url, options, "info")
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert _generation(url, options, "info") == rewritten  # not written over
    assert bucket.read("info") == info_bytes

    # Edited by a person after the plan (of the resumed addition) read it: refused, the
    # edit stands.
    pending = api.convert(url, storage_options=options, compute=False, resume=True, **ADDITION)
    assert isinstance(pending, api.PendingConversion)
    changed = {**info_before, "note": "edited by a person meanwhile"}
    bucket.write_object("info", json.dumps(changed).encode())
    edited = _generation(url, options, "info")
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert json.loads(bucket.read("info")) == changed  # the person's edit stands
    assert _generation(url, options, "info") == edited

    again = api.convert(url, storage_options=options, resume=True, **ADDITION)
    assert again.dataset == "addition"
    after = existing_datasets.object_crc32cs(url, options)
    assert existing_datasets.kept(before, after) == ["info"]
    assert json.loads(bucket.read("info")) == {**changed, "mesh": "mesh", "skeletons": "skeletons"}
    for sub in ("mesh", "skeletons"):
        report = api.verify(f"{url}/{sub}", storage_options=options)
        assert report.ok, report.problems
