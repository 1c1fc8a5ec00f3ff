"""Where a shard task's time goes, stage by stage, for the benchmarks (bench_gpu.py).

Device work is asynchronous: a stage that is timed waits for the device at its end, so its
time is the device's, not the launch's. Waiting costs overlap, so jobs time nothing (`None`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STAGE_NAMES = ("read", "h2d", "scatter", "encode", "aggregate", "d2h", "write")


class Stages:
    """Seconds per stage, summed over the shards timed with it."""

    def __init__(self, xp: Any):
        self.seconds = dict.fromkeys(STAGE_NAMES, 0.0)
        cuda = getattr(xp, "cuda", None)  # CuPy: wait for the current stream
        self._wait = (lambda: cuda.get_current_stream().synchronize()) if cuda else None

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            if self._wait is not None:
                self._wait()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@contextmanager
def untimed(name: str) -> Iterator[None]:
    """The stage of a task nobody times."""
    yield


def timer(stages: Stages | None) -> Any:
    return stages if stages is not None else untimed
