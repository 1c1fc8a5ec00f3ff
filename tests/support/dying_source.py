"""A source whose worker process dies, as one its nanny kills at its memory limit does, while
it reads one region (`x_start` onwards, on a worker) and a marker file exists: the test of
workers that keep dying under a shard task. Otherwise it is the .npy file it reads (and, for a
resumed job, the same source: its identity is the file's)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from shardwright.sources.base import ArraySource, file_identity


class DyingSource(ArraySource):
    def __init__(self, path: str, marker: str, x_start: int):
        self.path, self.marker, self.x_start = path, marker, x_start
        self.planner = os.getpid()  # only worker processes die: the planner reads it too
        super().__init__(
            path, np.load(path, mmap_mode="r").shape, np.load(path, mmap_mode="r").dtype, None
        )

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        dies = os.getpid() != self.planner and (slices[2].start or 0) >= self.x_start
        if dies and os.path.exists(self.marker):
            os._exit(1)  # the worker process is gone, as a killed one is
        return np.load(self.path, mmap_mode="r")[slices]

    def identity(self) -> dict[str, Any]:
        return file_identity(self.path)
