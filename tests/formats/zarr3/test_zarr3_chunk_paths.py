"""The CPU engine's two ways to a zarr3 shard's inner chunks give the same bytes: chunks of
64 KiB or more copied out and compressed one by one (cache-warm), smaller ones scattered a
whole epoch at once. Both are run on the same volumes (edge chunks padded, chunks of fill
value alone skipped, several channels, every compressor, the index at either end) and
every object written compared byte for byte."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from shardwright import api
from shardwright.formats.zarr3 import producers

CASES = {
    "edges-zstd": dict(compression="zstd"),
    "edges-gzip-index-start": dict(compression="gzip", index_location="start"),
    "none": dict(compression="none"),
    "blosc-two-channels": dict(compression="blosc"),
}


def _volume(name: str) -> np.ndarray:
    """z, y, x (c): not a multiple of the 64^3 chunk (edge chunks), a region of zeros that
    spans whole chunks (not stored), the rest varied."""
    rng = np.random.default_rng(len(name))
    zyx = rng.integers(0, 40, (70, 150, 130), dtype=np.uint8)
    zyx[:64, :64, :64] = 0
    return np.stack([zyx, 255 - zyx], axis=-1) if "channels" in name else zyx


def _objects(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".shardwright" not in p.parts
            and p.name != "shardwright-manifest.json"}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_chunk_by_chunk_and_epoch_scatter_write_the_same_bytes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    np.save(tmp_path / "v.npy", _volume(name))
    axes = "zyxc" if "channels" in name else "zyx"
    options = dict(format="zarr3", chunk_size=(64, 64, 64), resolution=(8, 8, 40),
                   source_axes=axes, scheduler="sync", progress=False, **CASES[name])  # fmt: skip
    assert producers.CHUNK_BY_CHUNK_BYTES <= 64**3  # the default takes the chunk-by-chunk way
    api.convert(str(tmp_path / "v.npy"), str(tmp_path / "by-chunk"), **options)
    monkeypatch.setattr(producers, "CHUNK_BY_CHUNK_BYTES", 2**62)  # every chunk scattered
    api.convert(str(tmp_path / "v.npy"), str(tmp_path / "scattered"), **options)
    by_chunk, scattered = _objects(tmp_path / "by-chunk"), _objects(tmp_path / "scattered")
    assert by_chunk.keys() == scattered.keys() and len(by_chunk) > 2
    assert by_chunk == scattered
    assert api.verify(str(tmp_path / "by-chunk"), str(tmp_path / "v.npy"), full=True,
                      source_axes=axes).ok  # fmt: skip
