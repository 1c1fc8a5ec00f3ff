"""The batched engine: the producer of a volume shard over an array namespace (numpy | CuPy).

Per block (an epoch read and moved to the device, or a pyramid level's region): scatter into
chunk-major layout, encode as one batch (raw: nothing to do; compressed_segmentation:
`codecs/compressed_segmentation_batch`; byte codecs through a `BatchCompressor`) and hold the
encoded chunks within the device budget (`aggregate.EncodedChunks`: beyond it older epochs are
copied out to the host spool the CPU engine uses, so memory stays bounded on the GPU too); once
every block is in, the chunks are arranged in the shard's order. `shard_task.run_task` does the
rest (resume, the one write, the receipt). With `xp = numpy` it runs on the CPU: the tests hold
its shards byte-identical to the CPU engine's, the oracle for the GPU (`gpu.py` runs it with
CuPy).

Chunks are not looped over in Python on the array path; the `HostLoopCompressor` (the CPU twin
of a batched GPU compressor such as nvCOMP) and the jpeg/png encodings, which have no batched
form, loop on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

from shardwright import codecs
from shardwright.codecs import ChunkEncoding, compressed_segmentation_batch
from shardwright.common.arrays import Array, Namespace, contiguous, exclusive_scan, to_host
from shardwright.common.receipts import Receipt
from shardwright.engine.aggregate import EncodedChunks, arrange_precomputed, arrange_zarr3
from shardwright.engine.blocks import Block, epoch_blocks, grid_offset
from shardwright.engine.scatter import precomputed_regions, zarr3_epoch_chunks
from shardwright.engine.shard_task import run_task
from shardwright.engine.stages import Stages, timer
from shardwright.engine.zarr2 import chunk_object
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.zarr3.chunks import InnerChunkChain
from shardwright.planning import ConversionPlan, ShardTask, to_zarr_order
from shardwright.planning.layouts import PrecomputedLayout, Zarr2Layout, Zarr3Layout
from shardwright.stores import Store


class BatchCompressor(Protocol):
    """Compresses many variable-length segments of one device buffer in one call."""

    def compress(
        self, xp: Namespace, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        """(buffer, offsets, sizes) of the compressed segments, in the same order."""
        ...


class HostLoopCompressor:
    """A byte stage applied segment by segment on the host: the CPU twin of a batched GPU
    compressor, producing the bytes the CPU engine stores."""

    def __init__(self, encode: Callable[[bytes], bytes]):
        self.encode = encode

    def compress(
        self, xp: Namespace, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        host = to_host(buffer)
        return _pack(
            xp,
            [
                self.encode(host[start : start + size].tobytes())
                for start, size in zip(offsets.tolist(), sizes.tolist(), strict=True)
            ],
        )


def run_shard_batched(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    xp: Namespace = np,
    *,
    compressor: BatchCompressor | None = None,
    resume: bool = False,
    device_budget: int | None = None,
    stages: Stages | None = None,
) -> Receipt:
    """Produce one shard object through the batched pipeline (or keep a proven one).

    `compressor` replaces the host-loop twin of the plan's byte stage (the GPU engine passes
    its nvCOMP batch compressor); `device_budget`: encoded bytes kept on the device (default:
    the plan's spool budget); `stages`: where a benchmark collects the time of each stage.
    """
    producer = BatchedProducer(
        plan, task, xp, compressor=compressor, device_budget=device_budget, stages=stages
    )
    return run_task(task.key, store, producer, resume=resume, stages=stages)


class BatchedProducer:
    """A volume shard from batches of chunks encoded in `xp`. `blocks` replaces the source
    reads (a pyramid's upper levels encode the region handed up, already in `xp`). While it
    produces, the plan's layout calls the method of its format (a `LayoutVisitor`)."""

    def __init__(
        self,
        plan: ConversionPlan,
        task: ShardTask,
        xp: Namespace = np,
        blocks: Iterable[Block] | None = None,
        *,
        compressor: BatchCompressor | None = None,
        device_budget: int | None = None,
        stages: Stages | None = None,
    ):
        self.plan, self.task, self.xp, self.blocks, self.stages = plan, task, xp, blocks, stages
        self.device_budget = plan.spool_budget if device_budget is None else device_budget
        if compressor is None and (host := plan.byte_stage.host) is not None:
            compressor = HostLoopCompressor(host)
        self.compressor = compressor
        self.stage = timer(stages)

    def produce(self) -> ShardFile | None:
        plan, task, xp = self.plan, self.task, self.xp
        if task.scattered:
            raise NotImplementedError(
                "the batched engine needs spatial-box shards (identity hash); murmurhash-"
                "sharded volumes run on the CPU engine"
            )
        blocks = self.blocks
        if blocks is None:
            blocks = epoch_blocks(plan, task, xp, stages=self.stages)
        held = EncodedChunks(xp, device_budget=self.device_budget, host_budget=plan.spool_budget)
        self._blocks, self._held = blocks, held
        try:
            shard: ShardFile | None = plan.layout.accept(self)
        except BaseException:
            held.close()
            raise
        if shard is None:
            held.close()
        return shard

    def precomputed(self, layout: PrecomputedLayout) -> ShardFile:
        plan, xp, stage, blocks, held = self.plan, self.xp, self.stage, self._blocks, self._held
        encoding = layout.chunk_encoding
        coords: list[np.ndarray] = []
        for cstart, _, block in blocks:
            with stage("scatter"):
                regions = list(precomputed_regions(xp, block, plan.chunk_size))
            del block
            for chunks, local in regions:
                with stage("encode"):
                    buffer, sizes = _encode_precomputed(xp, encoding, chunks)
                self._hold(held, buffer, sizes)
                coords.append(local + np.asarray(cstart))
            del regions
        ids = layout.scale.chunk_ids(np.concatenate(coords))
        with stage("aggregate"):
            return arrange_precomputed(layout.sharding, ids, held, self.task.shard_number)

    def zarr3(self, layout: Zarr3Layout) -> ShardFile | None:
        xp, stage, blocks, held = self.xp, self.stage, self._blocks, self._held
        meta, axes = layout.meta, layout.axes
        chain = InnerChunkChain.of(meta)
        positions: list[np.ndarray] = []
        for cstart, _, block in blocks:
            with stage("scatter"):
                ordered = contiguous(xp, to_zarr_order(block, axes))
                del block
                offset = grid_offset(axes, cstart, self.task.chunk_start)
                chunks, keep, in_shard = zarr3_epoch_chunks(xp, chain, ordered, offset)
                del ordered
                if not len(keep):
                    continue
                kept = chunks[xp.asarray(keep)].reshape(-1)
                del chunks
            self._hold(held, kept, np.full(len(keep), chain.nbytes, dtype=np.int64))
            del kept
            kept_at = in_shard[keep]
            positions.append(np.ravel_multi_index(tuple(kept_at.T), meta.chunks_per_shard))
        if not positions:
            return None
        with stage("aggregate"):
            return arrange_zarr3(
                meta.chunks_per_shard,
                np.concatenate(positions),
                held,
                meta.index_location,
                name=self.task.key,
            )

    def zarr2(self, layout: Zarr2Layout) -> ShardFile | None:
        """One chunk object, encoded on the host (Zarr v2 levels: no batch to make)."""
        with self.stage("encode"):
            return chunk_object(self.plan, self.task, layout, self._blocks)

    def _hold(self, held: EncodedChunks, buffer: Array, sizes: np.ndarray) -> None:
        """One batch of encoded chunks through the byte stage, then held."""
        with self.stage("encode"):
            offsets = exclusive_scan(np, sizes)
            if self.compressor is not None:
                buffer, offsets, sizes = self.compressor.compress(self.xp, buffer, offsets, sizes)
        with self.stage("d2h"):  # beyond the budget, older epochs are copied out here
            held.add(buffer, offsets, sizes)


def _encode_precomputed(
    xp: Namespace, encoding: ChunkEncoding, chunks: Array
) -> tuple[Array, np.ndarray]:
    """One region's chunks [N, c, z, y, x] -> (encoded bytes back to back, sizes)."""
    count = chunks.shape[0]
    if encoding.name == "raw":  # the scattered chunks are the encoded chunks
        per_chunk = int(np.prod(chunks.shape[1:])) * chunks.dtype.itemsize
        little = chunks.astype(chunks.dtype.newbyteorder("<"), copy=False)
        flat = xp.ascontiguousarray(little).reshape(-1)
        return flat.view(xp.uint8), np.full(count, per_chunk, dtype=np.int64)
    xyzc = chunks.transpose(0, 4, 3, 2, 1)
    if isinstance(encoding, codecs.CompressedSegmentationEncoding):
        return compressed_segmentation_batch.encode_batch(xp, xyzc, encoding.block_size)
    # jpeg / png: no batched form; encoded chunk by chunk on the host.
    host = to_host(xyzc)
    buffer, _, sizes = _pack(xp, [encoding.encode(host[i]) for i in range(count)])
    return buffer, sizes


def _pack(xp: Namespace, blobs: list[bytes]) -> tuple[Array, np.ndarray, np.ndarray]:
    """Blobs back to back in one device buffer: (buffer, offsets, sizes)."""
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return xp.asarray(joined), np.cumsum(sizes) - sizes, sizes
