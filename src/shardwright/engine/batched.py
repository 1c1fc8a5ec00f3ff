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

from shardwright.common.arrays import Array, Namespace, exclusive_scan, to_host
from shardwright.common.receipts import Receipt
from shardwright.engine.aggregate import EncodedChunks
from shardwright.engine.blocks import Block, epoch_blocks
from shardwright.engine.shard_task import run_task
from shardwright.engine.stages import Stages, timer
from shardwright.formats.shardfile import ShardFile
from shardwright.planning import ConversionPlan, ShardTask
from shardwright.planning.formats import driver
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
        return packed(
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
    reads (a pyramid's upper levels encode the region handed up, already in `xp`). What
    differs per format is its driver's `batched_shard`, which encodes each block's chunks
    into `hold` and arranges what `held` holds."""

    held: EncodedChunks  # the encoded chunks, while it produces
    _blocks: Iterable[Block]

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
        self._blocks, self.held = blocks, held
        try:
            shard = driver(plan.layout.format).batched_shard(self, plan.layout)
        except BaseException:
            held.close()
            raise
        if shard is None:
            held.close()
        return shard

    def region(self) -> Iterable[Block]:
        """The shard's blocks (its epochs read into `xp`, or the region handed up)."""
        return self._blocks

    def hold(self, buffer: Array, sizes: np.ndarray) -> None:
        """One batch of encoded chunks through the byte stage, then held (`held`)."""
        with self.stage("encode"):
            offsets = exclusive_scan(np, sizes)
            if self.compressor is not None:
                buffer, offsets, sizes = self.compressor.compress(self.xp, buffer, offsets, sizes)
        with self.stage("d2h"):  # beyond the budget, older epochs are copied out here
            self.held.add(buffer, offsets, sizes)


def packed(xp: Namespace, blobs: list[bytes]) -> tuple[Array, np.ndarray, np.ndarray]:
    """Blobs back to back in one buffer of `xp`: (buffer, offsets, sizes)."""
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    joined = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return xp.asarray(joined), np.cumsum(sizes) - sizes, sizes
