"""`.npy` files, memory-mapped: a box read touches only that box's pages."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwright.sources.base import ArraySource


class NpySource(ArraySource):
    def __init__(self, path: str, axes: str | None = None):
        self.path = path
        self._array: np.ndarray | None = None
        array = self._open()
        super().__init__(path, array.shape, array.dtype, axes)

    def _open(self) -> np.ndarray:
        if self._array is None:
            self._array = np.load(self.path, mmap_mode="r")
        return self._array

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        return self._open()[slices]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}
