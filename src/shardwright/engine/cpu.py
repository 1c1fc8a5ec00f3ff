"""The CPU engine: the streaming producer of a volume shard (the oracle of the GPU engine).

Chunks are taken one by one from the shard's blocks (its epochs read from the source, or a
pyramid level's region), encoded with the C codecs and added to the format's streaming
builder, whose spool keeps encoded chunks in memory up to the plan's spool budget and on local
disk beyond it. The builder's finished file is the shard's pieces; `shard_task.run_task` does
the rest (resume, the one write, the receipt).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from shardwright.codecs.base import Buffer
from shardwright.codecs.raw import RawEncoding
from shardwright.common.arrays import copy_runs
from shardwright.common.receipts import Receipt
from shardwright.engine.blocks import (
    Block,
    Cell,
    cells,
    epoch_blocks,
    grid_offset,
    scattered_cells,
)
from shardwright.engine.scatter import zarr3_epoch_chunks
from shardwright.engine.shard_task import run_task
from shardwright.engine.zarr2 import chunk_object
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.zarr3 import sharding as zarr3_sharding
from shardwright.formats.zarr3.chunks import InnerChunkChain
from shardwright.planning import ConversionPlan, ShardTask, to_zarr_order
from shardwright.planning.layouts import PrecomputedLayout, Zarr2Layout, Zarr3Layout
from shardwright.stores import Store

# Inner chunks at least this large are copied out and compressed one by one (cache-warm);
# smaller ones are scattered a whole epoch at once, where a Python step per chunk would cost
# more than the copy.
CHUNK_BY_CHUNK_BYTES = 64 * 1024


def run_shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    *,
    resume: bool = False,
    spool_dir: str | None = None,
) -> Receipt:
    """Produce one shard object on the CPU (or keep a proven one, when resuming)."""
    return run_task(task.key, store, CpuProducer(plan, task, spool_dir=spool_dir), resume=resume)


class CpuProducer:
    """A volume shard from chunks encoded one at a time into the streaming builders (a
    `LayoutVisitor`: the plan's layout calls the method of its format).

    `blocks` replaces the source reads of a box shard (a pyramid's upper levels encode the
    region the level below handed up); it is not consumed unless the shard is produced.
    """

    def __init__(
        self,
        plan: ConversionPlan,
        task: ShardTask,
        *,
        spool_dir: str | None = None,
        blocks: Iterable[Block] | None = None,
    ):
        self.plan, self.task, self.spool_dir, self.blocks = plan, task, spool_dir, blocks

    def produce(self) -> ShardFile | None:
        return self.plan.layout.accept(self)

    def precomputed(self, layout: PrecomputedLayout) -> ShardFile:
        plan, task = self.plan, self.task
        encoding = layout.chunk_encoding
        builder = layout.sharding.builder(
            task.shard_number,
            memory_budget=plan.spool_budget,
            spool_dir=self.spool_dir,
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
                    chunks, encode = self._cells(scatter=True), encoding.encoded_view
                else:  # copied out one at a time for an encoder of one chunk (cseg)
                    chunks = self._cells(scatter=False)
            for coord, voxels in chunks:
                builder.add(chunk_id(coord), encode(voxels))
            return builder.finish()
        except BaseException:
            builder.close()
            raise

    def zarr3(self, layout: Zarr3Layout) -> ShardFile | None:
        plan, task = self.plan, self.task
        meta, axes = layout.meta, layout.axes
        chain = InnerChunkChain.of(meta)
        builder = zarr3_sharding.ShardBuilder(
            meta.chunks_per_shard,
            index_location=meta.index_location,
            memory_budget=plan.spool_budget,
            spool_dir=self.spool_dir,
            name=task.key,
        )
        blocks = epoch_blocks(plan, task) if self.blocks is None else self.blocks
        for cstart, _, block in blocks:
            offset = grid_offset(axes, cstart, task.chunk_start)
            ordered = to_zarr_order(block, axes)
            del block
            if chain.nbytes >= CHUNK_BY_CHUNK_BYTES:
                for position, chunk in _zarr3_chunks_one_by_one(chain, ordered, offset):
                    builder.add(position, chain.encode_bytes(chunk.data))
                continue
            # Small chunks: one copy of the epoch into C-order chunks (the batched engine's
            # scatter), each compressed straight from it (the shard lays chunks out by
            # position, not by when they were added).
            chunks, stored, in_shard = zarr3_epoch_chunks(np, chain, ordered, offset)
            for index in stored.tolist():
                position = tuple(in_shard[index].tolist())
                builder.add(position, chain.encode_bytes(chunks[index].data))
        return builder.finish() if len(builder) else None  # all fill: zarr stores no shard

    def zarr2(self, layout: Zarr2Layout) -> ShardFile | None:
        blocks = epoch_blocks(self.plan, self.task) if self.blocks is None else self.blocks
        return chunk_object(self.plan, self.task, layout, blocks)

    def _cells(self, *, scatter: bool) -> Iterator[Cell]:
        blocks = epoch_blocks(self.plan, self.task) if self.blocks is None else self.blocks
        return cells(blocks, self.plan.chunk_size, scatter=scatter)


def _zarr3_chunks_one_by_one(
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
