"""The GPU engine: the batched pipeline (`batched.py`) with CuPy as its array namespace.

CuPy is imported here only, when a GPU task first runs, so CPU installs never need it. What
a worker keeps between tasks (the CuPy module, its memory pool, codec objects) lives in a
per-process cache, not per task.

Status: raw and compressed_segmentation run on the device; byte codecs (gzip, zstd, blosc)
still compress on the host after the copy out (`HostLoopCompressor`) unless asked
(`device_codecs=True`: gzip and zstd through nvCOMP, `engine/nvcomp.py`), until the nvCOMP
path is measured on a GPU.
"""

from __future__ import annotations

import functools
from typing import Any

from shardwright.codecs.nvcomp import ALGORITHMS, NvcompCompressor
from shardwright.engine.batched import BatchCompressor, run_shard_batched
from shardwright.engine.receipt import Receipt
from shardwright.errors import GpuUnavailable
from shardwright.plan import ConversionPlan, ShardTask
from shardwright.store import Store

GPU_ENCODINGS = ("raw", "compressed_segmentation")


@functools.cache
def cupy_module() -> Any:
    """CuPy, once per process, after checking that a device answers."""
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailable(
            "the GPU engine needs CuPy and a CUDA device: pip install 'shardwright[gpu-cu13]' "
            f"(gpu-cu12 for CUDA 12) on a machine with an NVIDIA GPU ({exc})"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise GpuUnavailable("the GPU engine found no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise GpuUnavailable(f"the GPU engine found no usable CUDA device ({exc})") from None
    return cupy


def check_gpu_plan(plan: ConversionPlan) -> None:
    """What the GPU engine cannot run, refused at plan time with the reason. (Whether this
    machine has a GPU is checked when it runs the job: a laptop may plan for a GPU cluster.)"""
    if plan.scattered:
        raise GpuUnavailable(
            "the GPU engine needs spatial-box shards (identity hash); murmurhash-sharded "
            "volumes run on the CPU engine"
        )
    if plan.info is not None and plan.scale.encoding not in GPU_ENCODINGS:
        raise GpuUnavailable(
            f"the GPU engine encodes {' and '.join(GPU_ENCODINGS)}; "
            f"use the CPU engine for {plan.scale.encoding}"
        )


def device_compressor(plan: ConversionPlan) -> BatchCompressor | None:
    """The nvCOMP compressor of the plan's byte codec, or None where the host compresses
    (no byte codec, blosc, or zarr3 inner chunks with a crc32c that is computed on the host)."""
    if plan.info is not None:
        codec, level = plan.sharding.data_encoding, plan.options.compression_level
    else:
        assert plan.zarr is not None
        compressor = plan.zarr.compressor
        if compressor is None or plan.zarr.checksum_inner:
            return None
        codec, level = compressor.name, compressor.level
    return NvcompCompressor(codec, level) if codec in ALGORITHMS else None


def run_shard_gpu(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    *,
    resume: bool = False,
    device_codecs: bool = False,
) -> Receipt:
    """One shard on this worker's GPU: the CPU engine's object (raw, compressed_segmentation),
    or one that decodes to the same chunks (`device_codecs`: gzip and zstd by nvCOMP)."""
    compressor = device_compressor(plan) if device_codecs else None
    return run_shard_batched(plan, task, store, cupy_module(), resume=resume, compressor=compressor)
