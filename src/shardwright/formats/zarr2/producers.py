"""A Zarr v2 level's task, for both engines: its region is one chunk of the level's array
(`layout.py`), pasted from the blocks in the array's axis order and encoded whole on the host,
or nothing where every element is the fill value (zarr stores no object)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from shardwright.common.arrays import to_host
from shardwright.engine.blocks import Block
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.zarr2.layout import Zarr2Layout
from shardwright.planning import ConversionPlan, ShardTask

if TYPE_CHECKING:
    from shardwright.engine.batched import BatchedProducer
    from shardwright.engine.cpu import CpuProducer


def cpu_shard(producer: CpuProducer, layout: Zarr2Layout) -> ShardFile | None:
    """The chunk object, encoded whole."""
    return chunk_object(producer.plan, producer.task, layout, producer.region())


def batched_shard(producer: BatchedProducer, layout: Zarr2Layout) -> ShardFile | None:
    """Encoded on the host (Zarr v2 levels: no batch to make)."""
    with producer.stage("encode"):
        return chunk_object(producer.plan, producer.task, layout, producer.region())


def chunk_object(
    plan: ConversionPlan, task: ShardTask, layout: Zarr2Layout, blocks: Iterable[Block]
) -> ShardFile | None:
    """The task's chunk object from its blocks (in any array namespace)."""
    array = layout.array
    fill = array.fill()
    chunk = np.full(array.chunks, 0 if fill is None else fill, dtype=plan.dtype)
    for cstart, _, block in blocks:
        voxels = layout.in_array_order(to_host(block))
        corner = [
            (c - t) * n for c, t, n in zip(cstart, task.chunk_start, plan.chunk_size, strict=True)
        ]
        start = layout.along(corner, 0, 0)
        chunk[tuple(slice(a, a + n) for a, n in zip(start, voxels.shape, strict=True))] = voxels
    data = array.encode(chunk)
    if data is None:
        return None
    return ShardFile(task.key, len(data), 1, lambda: [data])
