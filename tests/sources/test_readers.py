"""The readers' table and the one look each source gets: the first reader that claims a
location opens it, and a source on an object store is opened from one batch of metadata
reads, each document fetched once and nothing listed."""

from __future__ import annotations

import collections
import pathlib
from typing import Any

import numpy as np
import pytest
import s3fs
import tifffile

from shardwright import api
from shardwright.errors import SourceError
from shardwright.sources import SourceRequest, open_source
from shardwright.sources.location import look
from shardwright.sources.readers import READERS
from tests.support.object_store_servers import FaultyProxy, S3Server

RUN: dict[str, Any] = dict(scheduler="sync", progress=False, chunk_size=(16, 16, 16))


def _claimants(url: str) -> list[str]:
    location = look(SourceRequest(url))
    return [reader.name for reader in READERS if reader.claims(location)]


def _small_volume(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    voxels = np.random.default_rng(5).integers(0, 255, (24, 32, 40), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", voxels)
    return tmp_path / "vol.npy", voxels


def test_the_first_reader_that_claims_a_location_opens_it(tmp_path: pathlib.Path) -> None:
    """A precomputed folder that also holds a TIFF is claimed by two readers and opened as
    precomputed (the table's order); a folder of TIFF slices alone by one; a file by its
    leading bytes where its name does not say."""
    npy, voxels = _small_volume(tmp_path)
    api.convert(str(npy), str(tmp_path / "pc"), **RUN)
    tifffile.imwrite(tmp_path / "pc" / "preview.tif", voxels[0])
    assert _claimants(str(tmp_path / "pc")) == ["a precomputed volume", "TIFF slices"]
    assert type(open_source(str(tmp_path / "pc"))).__name__ == "PrecomputedSource"

    (tmp_path / "slices").mkdir()
    for z in range(3):
        tifffile.imwrite(tmp_path / "slices" / f"{z:03}.tif", voxels[z])
    assert _claimants(str(tmp_path / "slices")) == ["TIFF slices"]

    (tmp_path / "unnamed").write_bytes(npy.read_bytes())
    assert _claimants(str(tmp_path / "unnamed")) == ["a .npy array"]
    np.testing.assert_array_equal(open_source(str(tmp_path / "unnamed")).read(
        (0, 0, 0), (40, 32, 24))[..., 0], voxels.T)  # fmt: skip


def test_a_source_without_scales_refuses_a_scale_before_it_opens(tmp_path: pathlib.Path) -> None:
    npy, _ = _small_volume(tmp_path)
    with pytest.raises(SourceError, match="a .npy array has no scales"):
        open_source(str(npy), scale_key="1")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="the directory is empty"):
        open_source(str(tmp_path / "empty"))


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_an_object_store_source_reads_each_metadata_document_once_and_lists_nothing(
    tmp_path: pathlib.Path, s3: S3Server, fmt: str
) -> None:
    """Opening a precomputed volume or an OME-Zarr group on S3: one batch of metadata
    reads, each document GET at most once by the look (the precomputed `info` once in all:
    it was read by TensorStore, then again by the reader), no listing of the prefix (a
    zarr v2 array's chunks sit beside its metadata: a listing can be a million keys)."""
    npy, voxels = _small_volume(tmp_path)
    api.convert(str(npy), str(tmp_path / fmt), format=fmt, **RUN)
    s3.make_bucket("readers")
    s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True).put(
        str(tmp_path / fmt), f"readers/{fmt}", recursive=True
    )
    proxy = FaultyProxy(s3.endpoint, fault_rate=0.0)
    try:
        source = open_source(f"s3://readers/{fmt}", storage_options=s3.options(proxy.endpoint))
        opened = list(proxy.log)
        block = source.read((0, 0, 0), (40, 32, 24))
    finally:
        proxy.stop()
    np.testing.assert_array_equal(block[..., 0], voxels.T)
    assert not [r for r in opened if "list-type" in r or "delimiter" in r], opened
    gets = collections.Counter(r.split()[1].split("?")[0] for r in opened if r.startswith("GET"))
    if fmt == "precomputed":
        assert gets[f"/readers/{fmt}/info"] == 1, opened
    else:
        assert gets[f"/readers/{fmt}/zarr.json"] == 1, opened
        # The chosen dataset's own zarr.json: read by the look, then by TensorStore as it
        # opens the array it reads the voxels through.
        assert gets[f"/readers/{fmt}/0/zarr.json"] <= 2, opened
