"""What each engine can run, so that planning refuses a job before it starts without importing
the engine (or CuPy); each layout says which of its chunk encodings the GPU encodes."""

from __future__ import annotations

from shardwright.errors import GpuUnavailable
from shardwright.planning.volume import ConversionPlan


def check_gpu_plan(plan: ConversionPlan) -> None:
    """What the GPU engine cannot run, refused at plan time with the reason. (Whether this
    machine has a GPU is checked when it runs the job: a laptop may plan for a GPU cluster.)"""
    if plan.scattered:
        raise GpuUnavailable(
            "the GPU engine needs spatial-box shards (identity hash); murmurhash-sharded "
            "volumes run on the CPU engine"
        )
    for level in range(plan.level_count):
        refusal = plan.level_plan(level).layout.gpu_refusal()
        if refusal is not None:
            raise GpuUnavailable(refusal)
