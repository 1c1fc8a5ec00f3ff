"""A precomputed volume shard, for each engine: its chunks encoded (raw, compressed_segmentation,
jpeg/png) and named by chunk id into the sharded v1 builder (CPU) or arranged in the shard's
order from the batches encoded in the engine's array namespace (batched, the GPU's twin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shardwright import codecs
from shardwright.codecs import ChunkEncoding, compressed_segmentation_batch
from shardwright.codecs.base import Buffer
from shardwright.codecs.raw import RawEncoding
from shardwright.common.arrays import Array, Namespace, to_host
from shardwright.engine.aggregate import arrange_precomputed
from shardwright.engine.batched import packed
from shardwright.engine.blocks import cells, scattered_cells
from shardwright.engine.scatter import precomputed_regions
from shardwright.formats.precomputed.layout import PrecomputedLayout
from shardwright.formats.shardfile import ShardFile
from shardwright.planning import ShardTask

if TYPE_CHECKING:
    from shardwright.engine.batched import BatchedProducer
    from shardwright.engine.cpu import CpuProducer


def cpu_shard(producer: CpuProducer, layout: PrecomputedLayout) -> ShardFile:
    """The shard through the streaming builder, one chunk at a time."""
    plan, task = producer.plan, producer.task
    encoding = layout.chunk_encoding
    builder = layout.sharding.builder(
        task.shard_number,
        memory_budget=plan.spool_budget,
        spool_dir=producer.spool_dir,
        level=plan.compression_level,
    )
    encode: Callable[[np.ndarray], Buffer] = encoding.encode
    try:
        if task.scattered:
            assert task.shard_number is not None
            coords = plan.scattered_chunk_coords(task.shard_number)
            chunk_id = _scattered_ids(layout, coords)
            chunks = scattered_cells(plan, coords)
        else:
            chunk_id = _box_ids(layout, task)
            if isinstance(encoding, RawEncoding):  # the scattered chunks are their bytes
                chunks = cells(producer.region(), plan.chunk_size, scatter=True)
                encode = encoding.encoded_view
            else:  # copied out one at a time for an encoder of one chunk (cseg)
                chunks = cells(producer.region(), plan.chunk_size, scatter=False)
        for coord, voxels in chunks:
            builder.add(chunk_id(coord), encode(voxels))
        return builder.finish()
    except BaseException:
        builder.close()
        raise


def batched_shard(producer: BatchedProducer, layout: PrecomputedLayout) -> ShardFile:
    """The shard from each block's chunks scattered and encoded as one batch."""
    plan, xp, stage = producer.plan, producer.xp, producer.stage
    encoding = layout.chunk_encoding
    coords: list[np.ndarray] = []
    for cstart, _, block in producer.region():
        with stage("scatter"):
            regions = list(precomputed_regions(xp, block, plan.chunk_size))
        del block
        for chunks, local in regions:
            with stage("encode"):
                buffer, sizes = _encode_batch(xp, encoding, chunks)
            producer.hold(buffer, sizes)
            coords.append(local + np.asarray(cstart))
        del regions
    ids = layout.scale.chunk_ids(np.concatenate(coords))
    with stage("aggregate"):
        return arrange_precomputed(layout.sharding, ids, producer.held, producer.task.shard_number)


def _encode_batch(
    xp: Namespace, encoding: ChunkEncoding, chunks: Array
) -> tuple[Array, np.ndarray]:
    """One region's chunks [N, c, z, y, x] -> (encoded bytes back to back, sizes)."""
    count = chunks.shape[0]
    if isinstance(encoding, RawEncoding):  # the scattered chunks are the encoded chunks
        per_chunk = int(np.prod(chunks.shape[1:])) * chunks.dtype.itemsize
        little = chunks.astype(chunks.dtype.newbyteorder("<"), copy=False)
        flat = xp.ascontiguousarray(little).reshape(-1)
        return flat.view(xp.uint8), np.full(count, per_chunk, dtype=np.int64)
    xyzc = chunks.transpose(0, 4, 3, 2, 1)
    if isinstance(encoding, codecs.CompressedSegmentationEncoding):  # imported when used
        return compressed_segmentation_batch.encode_batch(xp, xyzc, encoding.block_size)
    # jpeg / png: no batched form; encoded chunk by chunk on the host.
    host = to_host(xyzc)
    buffer, _, sizes = packed(xp, [encoding.encode(host[i]) for i in range(count)])
    return buffer, sizes


def _box_ids(layout: PrecomputedLayout, task: ShardTask) -> Callable[[tuple[int, ...]], int]:
    """Chunk id of a grid coordinate of a box shard, from ids computed once, vectorized."""
    axes = [np.arange(a, b) for a, b in zip(task.chunk_start, task.chunk_stop, strict=True)]
    coords = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    ids = layout.scale.chunk_ids(coords).reshape([len(a) for a in axes])
    x0, y0, z0 = task.chunk_start
    return lambda coord: int(ids[coord[0] - x0, coord[1] - y0, coord[2] - z0])


def _scattered_ids(
    layout: PrecomputedLayout, coords: np.ndarray
) -> Callable[[tuple[int, ...]], int]:
    """Chunk id of each grid coordinate of a scattered shard, computed once, vectorized."""
    ids = layout.scale.chunk_ids(coords).tolist()
    return dict(zip(map(tuple, coords.tolist()), ids, strict=True)).__getitem__
