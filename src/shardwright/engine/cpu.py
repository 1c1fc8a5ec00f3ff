"""The CPU engine: one shard task, from source reads to one whole-object write.

A task reads its region in epochs (sub-boxes within the memory budget), cuts each epoch into
chunks, encodes them with C codecs, feeds the streaming shard builder (which spills to local
disk beyond its budget) and writes the finished object once. It returns a small receipt that
the coordinator folds into the manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from shardwright.engine import receipt
from shardwright.engine.receipt import Receipt
from shardwright.formats import zarr3_sharding
from shardwright.formats.shardfile import ShardFile
from shardwright.lifecycle import journal
from shardwright.plan import ConversionPlan, ShardTask, to_zarr_order
from shardwright.store import Store


def run_shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    *,
    resume: bool = False,
    spool_dir: str | None = None,
    cells: Iterable[Cell] | None = None,
) -> Receipt:
    """Produce one shard object (or confirm a valid one exists, when resuming).

    `cells` replaces the source reads (pyramid levels above the base encode reduced voxels);
    it is not consumed when a sound shard is kept.
    """
    return receipt.measured(store, lambda: _produce(plan, task, store, resume, spool_dir, cells))


def _produce(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    resume: bool,
    spool_dir: str | None,
    cells: Iterable[Cell] | None = None,
) -> Receipt:
    if resume:
        kept = journal.proven(store, task.key)
        if kept is not None:
            return kept
    shard: ShardFile | None
    if plan.info is not None:
        shard = _assemble_precomputed(plan, task, spool_dir, cells)
    else:
        shard = _assemble_zarr3(plan, task, spool_dir, cells)
    if shard is None:  # every chunk was fill: zarr stores no shard at all
        return receipt.stored(task, 0, 0, 0, empty=True)
    try:
        size, crc = store.write_object(task.key, shard.pieces)
    finally:
        shard.close()
    return receipt.stored(task, size, crc, shard.chunk_count)


# -- reading ------------------------------------------------------------------------------------
Cell = tuple[tuple[int, int, int], np.ndarray]  # (grid coordinate, [x, y, z, c] voxels)


def iter_chunks(
    plan: ConversionPlan,
    task: ShardTask,
    scattered_coords: np.ndarray | None = None,
    on_epoch: Callable[[tuple[int, int, int], np.ndarray], None] | None = None,
) -> Iterator[Cell]:
    """Every chunk of a shard with its voxels (edge chunks truncated), epoch by epoch.

    A scattered shard's chunks (`scattered_coords`, found by the caller) are read one by one.
    `on_epoch(voxel start, block)` sees each epoch as it is read (pyramids reduce it there,
    so the source is read once for every level).
    """
    chunk = plan.chunk_size
    if task.scattered:
        assert scattered_coords is not None
        for coord in scattered_coords.tolist():
            start = tuple(g * c for g, c in zip(coord, chunk, strict=True))
            stop = tuple(min(a + c, s) for a, c, s in zip(start, chunk, plan.size, strict=True))
            yield tuple(coord), plan.source.read(start, stop)
        return
    for cstart, cstop in plan.epochs(task):
        vstart = tuple(g * c for g, c in zip(cstart, chunk, strict=True))
        vstop = tuple(min(g * c, s) for g, c, s in zip(cstop, chunk, plan.size, strict=True))
        block = plan.source.read(vstart, vstop)  # type: ignore[arg-type]
        if on_epoch is not None:
            on_epoch(vstart, block)  # type: ignore[arg-type]
        yield from block_cells(block, cstart, cstop, chunk)
        del block


def block_cells(
    block: np.ndarray,
    cstart: tuple[int, int, int],
    cstop: tuple[int, int, int],
    chunk: tuple[int, int, int],
) -> Iterator[Cell]:
    """The chunks [cstart, cstop) of a block whose origin is chunk `cstart`'s corner (views)."""
    for gz in range(cstart[2], cstop[2]):
        for gy in range(cstart[1], cstop[1]):
            for gx in range(cstart[0], cstop[0]):
                lo = [(g - a) * c for g, a, c in zip((gx, gy, gz), cstart, chunk, strict=True)]
                yield (
                    (gx, gy, gz),
                    block[
                        lo[0] : lo[0] + chunk[0],
                        lo[1] : lo[1] + chunk[1],
                        lo[2] : lo[2] + chunk[2],
                    ],
                )


# -- precomputed --------------------------------------------------------------------------------
def _assemble_precomputed(
    plan: ConversionPlan,
    task: ShardTask,
    spool_dir: str | None,
    cells: Iterable[Cell] | None = None,
) -> ShardFile:
    scale = plan.scale
    encoding = scale.chunk_encoding(plan.options.jpeg_quality)
    builder = plan.sharding.builder(
        task.shard_number,
        memory_budget=plan.spool_budget,
        spool_dir=spool_dir,
        level=plan.options.compression_level,
    )
    coords = None
    if task.scattered:
        assert task.shard_number is not None
        coords = plan.scattered_chunk_coords(task.shard_number)
    chunk_id = _chunk_id_lookup(plan, task, coords)
    for coord, voxels in iter_chunks(plan, task, coords) if cells is None else cells:
        builder.add(chunk_id(coord), encoding.encode(voxels))
    return builder.finish()


def _chunk_id_lookup(
    plan: ConversionPlan, task: ShardTask, coords: np.ndarray | None
) -> Callable[[tuple[int, ...]], int]:
    """Chunk id of a grid coordinate, from ids computed once, vectorized, for the whole shard."""
    if coords is not None:
        table = dict(
            zip(map(tuple, coords.tolist()), plan.scale.chunk_ids(coords).tolist(), strict=True)
        )
        return table.__getitem__
    axes = [np.arange(a, b) for a, b in zip(task.chunk_start, task.chunk_stop, strict=True)]
    coords = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    ids = plan.scale.chunk_ids(coords).reshape([len(a) for a in axes])
    x0, y0, z0 = task.chunk_start
    return lambda coord: int(ids[coord[0] - x0, coord[1] - y0, coord[2] - z0])


# -- zarr3 --------------------------------------------------------------------------------------
def zarr_chunk_encoder(plan: ConversionPlan) -> Callable[[np.ndarray], bytes | None]:
    """[x, y, z, c] voxels -> stored inner-chunk bytes, or None for an all-fill chunk.

    Zarr inner chunks are full chunks in C order of the output axes, edge chunks padded with
    the fill value; chunks that are entirely fill are omitted (readers return the fill value).
    """
    meta = plan.zarr
    assert meta is not None
    axes = plan.zarr_axes
    dtype = np.dtype(meta.data_type).newbyteorder("<")
    fill = np.asarray(meta.fill_value, dtype=dtype)
    full_shape = tuple(meta.chunk_shape)
    compressor = meta.compressor.codec(dtype.itemsize) if meta.compressor else None
    checksum = meta.checksum_inner

    def encode(voxels_xyzc: np.ndarray) -> bytes | None:
        block = to_zarr_order(voxels_xyzc, axes)
        if np.all(block == fill):
            return None
        if block.shape != full_shape:
            padded = np.full(full_shape, fill, dtype=dtype)
            padded[tuple(slice(0, n) for n in block.shape)] = block
            block = padded
        data = np.ascontiguousarray(block, dtype=dtype).tobytes()
        if compressor is not None:
            data = compressor.compress(data)
        if checksum:
            data = zarr3_sharding.append_crc32c(data)
        return data

    return encode


def _assemble_zarr3(
    plan: ConversionPlan,
    task: ShardTask,
    spool_dir: str | None,
    cells: Iterable[Cell] | None = None,
) -> ShardFile | None:
    meta = plan.zarr
    assert meta is not None
    axes = plan.zarr_axes
    builder = zarr3_sharding.ShardBuilder(
        meta.chunks_per_shard,
        index_location=meta.index_location,
        memory_budget=plan.spool_budget,
        spool_dir=spool_dir,
        name=task.key,
    )
    encode = zarr_chunk_encoder(plan)
    for coord, voxels in iter_chunks(plan, task) if cells is None else cells:
        stored = encode(voxels)
        if stored is None:
            continue
        # Inner-chunk position in the shard, in the output's axis order (one chunk spans c).
        local = dict(zip("xyz", np.subtract(coord, task.chunk_start).tolist(), strict=True), c=0)
        builder.add(tuple(local[a] for a in axes), stored)
    return builder.finish() if len(builder) else None
