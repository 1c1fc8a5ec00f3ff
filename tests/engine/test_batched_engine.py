"""The GPU engine's batched pipeline run on numpy: every shard byte-identical to the CPU
engine's (the oracle), for both formats, every encoding, odd sizes and several epochs."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.engine.batched import run_shard_batched
from shardwright.engine.cpu import run_shard
from shardwright.stores import open_store
from tests.support import volumes

SIZE_ZYX = (37, 45, 52)  # no axis a multiple of the chunk size

# The GPU verification wheelhouse leaves imagecodecs (png only) out: png is no GPU path.
NO_IMAGECODECS = pytest.mark.skipif(
    importlib.util.find_spec("imagecodecs") is None, reason="png needs imagecodecs"
)
CASES: list[Any] = [
    ("image", "uint8", {"compression": "none"}),
    ("image", "uint8", {"compression": "gzip"}),
    ("image", "uint16", {"compression": "none", "source_axes": "czyx"}),
    pytest.param("image", "uint8", {"encoding": "png"}, marks=NO_IMAGECODECS),
    ("image", "uint8", {"encoding": "jpeg", "compression": "none"}),
    ("labels", "uint64", {"encoding": "compressed_segmentation", "layer_type": "segmentation"}),
    ("labels", "uint32", {"encoding": "compressed_segmentation", "compression": "none"}),
    ("image", "uint8", {"format": "zarr3", "compression": "gzip"}),
    ("image", "uint16", {"format": "zarr3", "compression": "zstd", "index_location": "start"}),
    ("labels", "uint64", {"format": "zarr3", "compression": "none"}),
    ("image", "uint8", {"format": "zarr3", "compression": "blosc", "source_axes": "czyx"}),
]


def _volume(kind: str, dtype: str, channels: bool) -> np.ndarray:
    return volumes.noise_or_blocky_labels_zyx(kind, dtype, channels, SIZE_ZYX)


@pytest.mark.parametrize("device_budget", [None, 0], ids=["within-budget", "copied-out"])
@pytest.mark.parametrize(("kind", "dtype", "options"), CASES)
def test_batched_shards_equal_the_cpu_engines(
    tmp_path: pathlib.Path,
    kind: str,
    dtype: str,
    options: dict[str, Any],
    device_budget: int | None,
) -> None:
    """`copied-out`: a device budget of nothing, so every epoch leaves the device as soon as
    it is encoded and the shard is assembled from the host spool."""
    volume = _volume(kind, dtype, "source_axes" in options)
    np.save(tmp_path / "v.npy", volume)
    plan = api.plan(
        str(tmp_path / "v.npy"),
        str(tmp_path / "cpu"),
        chunk_size=(16, 16, 8),
        target_shard_bytes=40_000,
        min_shards=2,
        **options,
    )
    # Epochs of 2 x 1 x 2 chunks: several per shard, so the pipeline stitches epochs together.
    plan = dataclasses.replace(plan, epoch_shape_chunks=(2, 1, 2))
    tasks = list(plan.shards())
    assert len(tasks) >= 2
    cpu, batched = open_store(str(tmp_path / "cpu")), open_store(str(tmp_path / "batched"))
    compared = 0
    for task in tasks:
        want = run_shard(plan, task, cpu)
        got = run_shard_batched(plan, task, batched, np, device_budget=device_budget)
        fields = ("key", "size", "crc32c", "chunks", "empty", "requests")
        assert {k: getattr(got, k) for k in fields} == {k: getattr(want, k) for k in fields}
        if not want.empty:
            assert batched.read(task.key) == cpu.read(task.key)
            compared += 1
    assert compared >= 2


def test_batched_zarr3_shards_read_back_by_tensorstore(tmp_path: pathlib.Path) -> None:
    """Beyond equal bytes: the batched output, with its metadata, opens in TensorStore."""
    volume = _volume("image", "uint16", False)
    np.save(tmp_path / "v.npy", volume)
    dest = tmp_path / "out"
    plan = api.plan(
        str(tmp_path / "v.npy"),
        str(dest),
        format="zarr3",
        chunk_size=(16, 16, 8),
        target_shard_bytes=40_000,
        min_shards=2,
    )
    store = open_store(str(dest))
    for key, document in plan.metadata_documents():  # the level array 0/, the OME group
        store.write_text(key, json.dumps(document))
    for task in plan.shards():
        run_shard_batched(plan, task, store, np)
    got = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/0/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(got), volume)


def test_murmurhash_shards_are_left_to_the_cpu_engine(tmp_path: pathlib.Path) -> None:
    np.save(tmp_path / "v.npy", _volume("image", "uint8", False))
    plan = api.plan(
        str(tmp_path / "v.npy"),
        str(tmp_path / "out"),
        chunk_size=(16, 16, 8),
        hash="murmurhash3_x86_128",
    )
    task = next(iter(plan.shards()))
    with pytest.raises(NotImplementedError, match="spatial-box shards"):
        run_shard_batched(plan, task, open_store(str(tmp_path / "out")), np)
