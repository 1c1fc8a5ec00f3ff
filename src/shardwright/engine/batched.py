"""The batched shard pipeline of the GPU engine, written once over an array namespace.

Per shard: each epoch is read, moved to the device (`xp.asarray`), scattered into chunk-major
layout and encoded as one batch (raw: nothing to do; compressed_segmentation: `cseg_batch`;
byte codecs through a `BatchCompressor`); the encoded epochs are held within the memory budget
(`aggregate.EncodedChunks`: on the device, older epochs copied out to the host spool beyond
it), then arranged in the shard's order and written as one object. With `xp = numpy` it runs
on the CPU: the tests hold its shards byte-identical to the CPU engine's, which is the oracle
for the GPU.

Chunks are not looped over in Python on the array path; the `HostLoopCompressor` (the CPU twin
of a batched GPU compressor such as nvCOMP) and the jpeg/png encodings, which have no batched
form, loop on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from shardwright.arrays import Array, exclusive_scan
from shardwright.codecs import ByteCodec, byte_codec, compressed_segmentation_batch
from shardwright.engine import receipt
from shardwright.engine.aggregate import (
    EncodedChunks,
    ShardPieces,
    arrange_precomputed,
    arrange_zarr3,
    to_host,
)
from shardwright.engine.receipt import Receipt
from shardwright.engine.scatter import precomputed_regions, scatter_zarr3
from shardwright.engine.stages import Stages, timer
from shardwright.formats import zarr3_sharding
from shardwright.lifecycle import journal
from shardwright.plan import ConversionPlan, ShardTask, to_zarr_order
from shardwright.store import Store

Block = tuple[tuple[int, int, int], Array]  # (first chunk (x, y, z), voxels [x, y, z, c])


class BatchCompressor(Protocol):
    """Compresses many variable-length segments of one device buffer in one call."""

    def compress(
        self, xp: Any, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        """(buffer, offsets, sizes) of the compressed segments, in the same order."""
        ...


class HostLoopCompressor:
    """A byte codec applied segment by segment on the host: the CPU twin of a batched GPU
    compressor, producing the bytes the CPU engine's codec produces."""

    def __init__(self, codec: ByteCodec, checksum: bool = False):
        self.codec = codec
        self.checksum = checksum

    def compress(
        self, xp: Any, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        host = to_host(buffer)
        out = []
        for start, size in zip(offsets.tolist(), sizes.tolist(), strict=True):
            data = self.codec.compress(host[start : start + size].tobytes())
            out.append(zarr3_sharding.append_crc32c(data) if self.checksum else data)
        return _pack(xp, out)


class ChecksumOnly:
    """zarr3 inner chunks without a compressor but with the crc32c codec."""

    def compress(
        self, xp: Any, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        host = to_host(buffer)
        return _pack(
            xp,
            [
                zarr3_sharding.append_crc32c(host[start : start + size].tobytes())
                for start, size in zip(offsets.tolist(), sizes.tolist(), strict=True)
            ],
        )


def run_shard_batched(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    xp: Any = np,
    *,
    compressor: BatchCompressor | None = None,
    resume: bool = False,
    blocks: Iterable[Block] | None = None,
    on_epoch: Callable[[tuple[int, int, int], Array], None] | None = None,
    device_budget: int | None = None,
    stages: Stages | None = None,
) -> Receipt:
    """Produce one shard object through the batched pipeline; the receipt is the CPU engine's,
    with the requests this task made.

    `compressor` replaces the host-loop twin of the plan's byte codec (the GPU engine passes
    its nvCOMP batch compressor). Pyramids pass `blocks` (an upper level's region, already on
    the device, instead of source reads) or `on_epoch(voxel start, device block)`, which sees
    each epoch as it is read (the base level reduces it there for the level above).
    `device_budget`: encoded bytes kept on the device (default: the plan's spool budget);
    `stages`: where a benchmark collects the time of each stage.
    """
    return receipt.measured(
        store,
        lambda: _produce(
            plan, task, store, xp, compressor, resume, blocks, on_epoch, device_budget, stages
        ),
    )


def _produce(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    xp: Any,
    compressor: BatchCompressor | None,
    resume: bool,
    blocks: Iterable[Block] | None,
    on_epoch: Callable[[tuple[int, int, int], Array], None] | None,
    device_budget: int | None,
    stages: Stages | None,
) -> Receipt:
    if resume:
        kept = journal.proven(store, task.key)
        if kept is not None:
            return kept
    if task.scattered:
        raise NotImplementedError(
            "the batched engine needs spatial-box shards (identity hash); murmurhash-sharded "
            "volumes run on the CPU engine"
        )
    budget = plan.spool_budget if device_budget is None else device_budget
    held = EncodedChunks(xp, device_budget=budget, host_budget=plan.spool_budget)
    try:
        epochs = epoch_blocks(plan, task, xp, on_epoch, stages) if blocks is None else blocks
        pieces: ShardPieces | None
        if plan.info is not None:
            pieces = _precomputed_shard(plan, task, xp, compressor, epochs, held, stages)
        else:
            pieces = _zarr3_shard(plan, task, xp, compressor, epochs, held, stages)
        if pieces is None:
            return receipt.stored(task, 0, 0, 0, empty=True)
        with timer(stages)("write"):
            size, crc = store.write_object(task.key, pieces)
        return receipt.stored(task, size, crc, len(held))
    finally:
        held.close()


def epoch_blocks(
    plan: ConversionPlan,
    task: ShardTask,
    xp: Any,
    on_epoch: Callable[[tuple[int, int, int], Array], None] | None = None,
    stages: Stages | None = None,
) -> Iterator[Block]:
    """(epoch chunk start, the epoch's voxels [x, y, z, c] on the device) per epoch."""
    chunk = plan.chunk_size
    stage = timer(stages)
    for cstart, cstop in plan.epochs(task):
        vstart = tuple(g * c for g, c in zip(cstart, chunk, strict=True))
        vstop = tuple(min(g * c, s) for g, c, s in zip(cstop, chunk, plan.size, strict=True))
        with stage("read"):
            voxels = plan.source.read(vstart, vstop)  # type: ignore[arg-type]
        with stage("h2d"):
            block = xp.asarray(voxels)
        del voxels
        if on_epoch is not None:
            on_epoch(vstart, block)  # type: ignore[arg-type]
        yield cstart, block


# -- precomputed --------------------------------------------------------------------------------
def _precomputed_shard(
    plan: ConversionPlan,
    task: ShardTask,
    xp: Any,
    compressor: BatchCompressor | None,
    epochs: Iterable[Block],
    held: EncodedChunks,
    stages: Stages | None,
) -> ShardPieces:
    scale = plan.scale
    encoding = scale.chunk_encoding(plan.options.jpeg_quality)
    if compressor is None and plan.sharding.data_encoding != "raw":
        codec = byte_codec(plan.sharding.data_encoding, level=plan.options.compression_level)
        assert codec is not None
        compressor = HostLoopCompressor(codec)
    stage = timer(stages)
    coords: list[np.ndarray] = []
    for cstart, block in epochs:
        with stage("scatter"):
            regions = list(precomputed_regions(xp, block, plan.chunk_size))
        del block
        for chunks, local in regions:
            with stage("encode"):
                buffer, sizes = _encode_precomputed(xp, encoding, chunks)
                offsets = exclusive_scan(np, sizes)
                if compressor is not None:
                    buffer, offsets, sizes = compressor.compress(xp, buffer, offsets, sizes)
            with stage("d2h"):  # beyond the budget, older epochs are copied out here
                held.add(buffer, offsets, sizes)
            coords.append(local + np.asarray(cstart))
        del regions
    ids = scale.chunk_ids(np.concatenate(coords))
    with stage("aggregate"):
        return arrange_precomputed(plan.sharding, ids, held, task.shard_number)


def _encode_precomputed(xp: Any, encoding: Any, chunks: Array) -> tuple[Array, np.ndarray]:
    """One region's chunks [N, c, z, y, x] -> (encoded bytes back to back, sizes)."""
    count = chunks.shape[0]
    if encoding.name == "raw":  # the scattered chunks are the encoded chunks
        per_chunk = int(np.prod(chunks.shape[1:])) * chunks.dtype.itemsize
        little = chunks.astype(chunks.dtype.newbyteorder("<"), copy=False)
        flat = xp.ascontiguousarray(little).reshape(-1)
        return flat.view(xp.uint8), np.full(count, per_chunk, dtype=np.int64)
    xyzc = chunks.transpose(0, 4, 3, 2, 1)
    if encoding.name == "compressed_segmentation":
        return compressed_segmentation_batch.encode_batch(xp, xyzc, encoding.block_size)
    # jpeg / png: no batched form; encoded chunk by chunk on the host.
    host = to_host(xyzc)
    buffer, _, sizes = _pack(xp, [encoding.encode(host[i]) for i in range(count)])
    return buffer, sizes


# -- zarr3 --------------------------------------------------------------------------------------
def _zarr3_shard(
    plan: ConversionPlan,
    task: ShardTask,
    xp: Any,
    compressor: BatchCompressor | None,
    epochs: Iterable[Block],
    held: EncodedChunks,
    stages: Stages | None,
) -> ShardPieces | None:
    meta = plan.zarr
    assert meta is not None
    axes = plan.zarr_axes
    dtype = np.dtype(meta.data_type).newbyteorder("<")
    if compressor is None and meta.compressor is not None:
        compressor = HostLoopCompressor(meta.compressor.codec(dtype.itemsize), meta.checksum_inner)
    elif compressor is None and meta.checksum_inner:
        compressor = ChecksumOnly()
    chunk_shape = tuple(meta.chunk_shape)
    chunk_bytes = int(np.prod(chunk_shape)) * dtype.itemsize
    stage = timer(stages)
    positions: list[np.ndarray] = []
    for cstart, block in epochs:
        with stage("scatter"):
            ordered = xp.ascontiguousarray(to_zarr_order(block, axes)).astype(dtype, copy=False)
            del block
            buffer, local = scatter_zarr3(xp, ordered, chunk_shape, meta.fill_value)
            del ordered
            elements = buffer.view(dtype).reshape(len(local), -1)
            fill = xp.asarray(meta.fill_value, dtype=dtype)
            present = to_host(~xp.all(elements == fill, axis=1))
            if not present.any():
                continue
            keep = np.nonzero(present)[0]
            kept = buffer.reshape(len(local), chunk_bytes)[xp.asarray(keep)].reshape(-1)
            del buffer, elements
        with stage("encode"):
            sizes = np.full(len(keep), chunk_bytes, dtype=np.int64)
            offsets = exclusive_scan(np, sizes)
            if compressor is not None:
                kept, offsets, sizes = compressor.compress(xp, kept, offsets, sizes)
        with stage("d2h"):  # beyond the budget, older epochs are copied out here
            held.add(kept, offsets, sizes)
        del kept
        # Epoch-local chunk coordinates (output axis order) -> positions in the shard.
        offset = dict(zip("xyz", np.subtract(cstart, task.chunk_start).tolist(), strict=True))
        shift = np.array([offset.get(a, 0) for a in axes])
        in_shard = local[keep] + shift
        positions.append(np.ravel_multi_index(tuple(in_shard.T), meta.chunks_per_shard))
    if not positions:
        return None
    with stage("aggregate"):
        return arrange_zarr3(
            meta.chunks_per_shard, np.concatenate(positions), held, meta.index_location
        )


# -- helpers ------------------------------------------------------------------------------------
def _pack(xp: Any, blobs: list[bytes]) -> tuple[Array, np.ndarray, np.ndarray]:
    """Blobs back to back in one device buffer: (buffer, offsets, sizes)."""
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return xp.asarray(joined), np.cumsum(sizes) - sizes, sizes
