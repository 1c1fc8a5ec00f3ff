"""What each engine can run, as plain data, so planning refuses a job before it starts
without importing the engine (or CuPy)."""

from __future__ import annotations

from shardwright.errors import GpuUnavailable
from shardwright.planning.volume import ConversionPlan

# Precomputed chunk encodings the GPU engine encodes on the device (zarr3 chunks are raw).
GPU_ENCODINGS = ("raw", "compressed_segmentation")


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
