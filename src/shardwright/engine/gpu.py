"""The GPU engine: the batched pipeline (`batched.py`) with CuPy as its array namespace.

CuPy is imported here only, when a GPU task first runs, so CPU installs never need it. What
a worker keeps between tasks (the CuPy module, its memory pool, codec objects) lives in a
per-process cache, not per task.

Raw and compressed_segmentation are encoded on the device into the CPU engine's very bytes;
gzip and zstd are compressed by nvCOMP on the device (`codecs/nvcomp.py`): other encoders'
bytes, decoding to the same chunks. Measured on an H200 (benchmarks/README.md), nvCOMP
compressed 1 GiB in 0.22 s (gzip) and 0.40 s (zstd) where one host thread took 3.9 s and
2.7 s, so it is the default; `device_codecs=False` keeps the host's compressor (blosc always
runs there: `HostLoopCompressor`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shardwright.codecs.nvcomp import ALGORITHMS, NvcompCompressor
from shardwright.common.receipts import Receipt
from shardwright.engine.batched import BatchCompressor, run_shard_batched
from shardwright.errors import GpuUnavailable
from shardwright.planning import ConversionPlan, ShardTask
from shardwright.stores import Store
from shardwright.version import install_command


@functools.cache
def cupy_module() -> Any:
    """CuPy, once per process, after checking that a device answers."""
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailable(
            f"the GPU engine needs CuPy and a CUDA device: {install_command('gpu-cu13')} "
            f"(gpu-cu12 for CUDA 12) on a machine with an NVIDIA GPU ({exc})"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise GpuUnavailable("the GPU engine found no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise GpuUnavailable(f"the GPU engine found no usable CUDA device ({exc})") from None
    return cupy


_STREAMS = threading.local()  # each worker thread's own CUDA stream


@contextmanager
def own_stream(cupy: Any) -> Iterator[None]:
    """A task's device work on its thread's own non-blocking CUDA stream, waited for at the
    end: the tasks of a worker's other threads overlap it (one's copies while another
    computes or writes), and what a task hands on (a pyramid's reduced region) is complete
    when it returns."""
    stream = getattr(_STREAMS, "stream", None)
    if stream is None:
        stream = _STREAMS.stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        yield
        stream.synchronize()


def device_compressor(plan: ConversionPlan) -> BatchCompressor | None:
    """The nvCOMP compressor of the plan's byte stage, or None where the host compresses
    (no byte codec, blosc, or zarr3 inner chunks with a crc32c that is computed on the host)."""
    stage = plan.byte_stage
    if stage.checksum or stage.codec not in ALGORITHMS:
        return None
    return NvcompCompressor(stage.codec, stage.level)


def run_shard_gpu(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    *,
    resume: bool = False,
    device_codecs: bool = True,
) -> Receipt:
    """One shard on this worker's GPU: the CPU engine's object (raw, compressed_segmentation),
    or one that decodes to the same chunks (`device_codecs`: gzip and zstd by nvCOMP)."""
    compressor = device_compressor(plan) if device_codecs else None
    cupy = cupy_module()
    with own_stream(cupy):
        return run_shard_batched(plan, task, store, cupy, resume=resume, compressor=compressor)
