"""`.npy` files, memory-mapped: a box read touches only that box's pages."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, file_identity


class NpySource(ArraySource):
    """A `.npy` array, memory-mapped by each read (a map is never pickled or kept)."""

    def __init__(self, path: str, axes: str | None = None, url: str | None = None):
        self.path = path
        try:
            array = self._map()
        except (ValueError, OSError, EOFError) as exc:
            raise SourceError(f"{url or path}: not a readable .npy array ({exc})") from exc
        super().__init__(url or path, array.shape, array.dtype, axes)

    def _map(self) -> np.ndarray:
        array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        if not isinstance(array, np.ndarray):
            raise SourceError("not a single array")
        return array

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        # A view of a map made for this read alone: the engine's next step (scatter, staging)
        # makes the only copy, and the map goes when the engine drops the view. A map kept
        # for the worker's life kept every page it had touched resident, and Dask counts
        # those against the worker's memory limit: the workers converting a 32 GiB .npy were
        # restarted at 7.9 GiB each, a task of 1 GiB planned.
        return self._map()[slices]

    def identity(self) -> dict[str, Any]:
        return file_identity(self.path)
