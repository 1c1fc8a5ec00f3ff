"""`.npy` files, memory-mapped: a box read touches only that box's pages."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, file_identity


class NpySource(ArraySource):
    """A `.npy` array; the memory map is re-created on each worker, never pickled."""

    def __init__(self, path: str, axes: str | None = None, url: str | None = None):
        self.path = path
        self._array: np.ndarray | None = None
        try:
            array = self._open()
        except (ValueError, OSError, EOFError) as exc:
            raise SourceError(f"{url or path}: not a readable .npy array ({exc})") from exc
        super().__init__(url or path, array.shape, array.dtype, axes)

    def _open(self) -> np.ndarray:
        if self._array is None:
            array = np.load(self.path, mmap_mode="r", allow_pickle=False)
            if not isinstance(array, np.ndarray):
                raise SourceError("not a single array")
            self._array = array
        return self._array

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        # A view of the map: the engine's next step (scatter, encode) makes the only copy, and
        # the pages are read as it does so. A box of a .npy file costs no extra memory copy.
        return self._open()[slices]

    def identity(self) -> dict[str, Any]:
        return file_identity(self.path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}
