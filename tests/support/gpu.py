"""Whether the GPU tests can run here: tests marked `gpu` skip by themselves (conftest.py)
where no CUDA device answers, and tests that choose their cases by it ask the same question."""

from __future__ import annotations

import functools


@functools.cache
def gpu_missing() -> str | None:
    """Why GPU tests cannot run here (None: CuPy and a CUDA device answer)."""
    from shardwright.engine.gpu import GpuUnavailable, cupy_module

    try:
        cupy_module()
    except GpuUnavailable as exc:
        return str(exc)
    return None
