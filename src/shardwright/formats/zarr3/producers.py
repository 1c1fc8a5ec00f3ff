"""A Zarr v3 shard (`sharding_indexed`), for each engine: its inner chunks, in the array's axis
order, through the codec chain into the streaming builder (CPU), or scattered and held as
batches in the engine's array namespace, then arranged by position (batched, the GPU's twin);
nothing where every chunk is the fill value (zarr stores no shard)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from shardwright.common.arrays import contiguous, copy_runs
from shardwright.engine.aggregate import arrange_zarr3
from shardwright.engine.blocks import grid_offset
from shardwright.engine.scatter import zarr3_epoch_chunks
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.zarr3 import sharding
from shardwright.formats.zarr3.chunks import InnerChunkChain
from shardwright.formats.zarr3.layout import Zarr3Layout
from shardwright.planning import to_zarr_order

if TYPE_CHECKING:
    from shardwright.engine.batched import BatchedProducer
    from shardwright.engine.cpu import CpuProducer

# Inner chunks at least this large are copied out and compressed one by one (cache-warm);
# smaller ones are scattered a whole epoch at once, where a Python step per chunk would cost
# more than the copy.
CHUNK_BY_CHUNK_BYTES = 64 * 1024


def cpu_shard(producer: CpuProducer, layout: Zarr3Layout) -> ShardFile | None:
    """The shard through the streaming builder, chunk by chunk or an epoch at a time."""
    task, meta, axes = producer.task, layout.meta, layout.axes
    chain = InnerChunkChain.of(meta)
    builder = sharding.ShardBuilder(
        meta.chunks_per_shard,
        index_location=meta.index_location,
        memory_budget=producer.plan.spool_budget,
        spool_dir=producer.spool_dir,
        name=task.key,
    )
    for cstart, _, block in producer.region():
        offset = grid_offset(axes, cstart, task.chunk_start)
        ordered = to_zarr_order(block, axes)
        del block
        if chain.nbytes >= CHUNK_BY_CHUNK_BYTES:
            for position, chunk in _chunks_one_by_one(chain, ordered, offset):
                builder.add(position, chain.encode_bytes(chunk.data))
            continue
        # Small chunks: one copy of the epoch into C-order chunks (the batched engine's
        # scatter), each compressed straight from it (the shard lays chunks out by position,
        # not by when they were added).
        chunks, stored, in_shard = zarr3_epoch_chunks(np, chain, ordered, offset)
        for index in stored.tolist():
            position = tuple(in_shard[index].tolist())
            builder.add(position, chain.encode_bytes(chunks[index].data))
    return builder.finish() if len(builder) else None


def batched_shard(producer: BatchedProducer, layout: Zarr3Layout) -> ShardFile | None:
    """The shard from each block's chunks scattered as one batch, then arranged."""
    xp, stage, meta, axes = producer.xp, producer.stage, layout.meta, layout.axes
    chain = InnerChunkChain.of(meta)
    positions: list[np.ndarray] = []
    for cstart, _, block in producer.region():
        with stage("scatter"):
            ordered = contiguous(xp, to_zarr_order(block, axes))
            del block
            offset = grid_offset(axes, cstart, producer.task.chunk_start)
            chunks, keep, in_shard = zarr3_epoch_chunks(xp, chain, ordered, offset)
            del ordered
            if not len(keep):
                continue
            kept = chunks[xp.asarray(keep)].reshape(-1)
            del chunks
        producer.hold(kept, np.full(len(keep), chain.nbytes, dtype=np.int64))
        del kept
        kept_at = in_shard[keep]
        positions.append(np.ravel_multi_index(tuple(kept_at.T), meta.chunks_per_shard))
    if not positions:
        return None
    with stage("aggregate"):
        return arrange_zarr3(
            meta.chunks_per_shard,
            np.concatenate(positions),
            producer.held,
            meta.index_location,
            name=producer.task.key,
        )


def _chunks_one_by_one(
    chain: InnerChunkChain, ordered: np.ndarray, epoch_offset: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """An epoch's inner chunks (its position in the shard grid, its elements), each copied
    out on its own right before it is compressed, so that the compressor and the fill check
    read it from the core's cache instead of a second pass over the whole epoch in memory;
    edge chunks padded with the fill value, chunks of fill value alone skipped. The chunk is
    one buffer reused: valid until the next one is asked for."""
    ordered = ordered.astype(chain.dtype, copy=False)
    chunk = np.empty(chain.shape, chain.dtype)
    along = [
        [(i + o, slice(i * c, min((i + 1) * c, n))) for i in range(-(-n // c))]
        for n, c, o in zip(ordered.shape, chain.shape, epoch_offset, strict=True)
    ]
    for cell in itertools.product(*along):
        region = ordered[tuple(cut for _, cut in cell)]
        if region.shape == chunk.shape:
            copy_runs(chunk, region)
        else:
            chunk.fill(chain.fill_value)
            copy_runs(chunk[tuple(slice(0, n) for n in region.shape)], region)
        if chain.present(np, chunk[None])[0]:
            yield tuple(position for position, _ in cell), chunk
