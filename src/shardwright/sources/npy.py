"""`.npy` files, memory-mapped: a box read touches only that box's pages."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, file_identity


class NpySource(ArraySource):
    """A `.npy` array, memory-mapped by each read (a map is never pickled or kept)."""

    def __init__(self, path: str, axes: str | None = None, url: str | None = None):
        self.path = path
        # NumPy reads a file without its magic bytes as a pickle, and refuses it as "pickled
        # (object) data": a truncated or foreign file is named for what it is instead.
        try:
            with open(path, "rb") as f:
                magic = np.lib.format.MAGIC_PREFIX
                foreign = f.read(len(magic)) != magic
        except OSError as exc:
            raise SourceError(f"{url or path}: not a readable .npy array ({exc})") from exc
        if foreign:
            raise SourceError(
                f"{url or path}: not a .npy file (it does not begin with NumPy's header, "
                "\\x93NUMPY); a truncated copy, or another format named .npy?"
            )
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise SourceError(f"{url or path}: not a readable .npy array ({exc})") from exc
        if not isinstance(array, np.memmap):
            raise SourceError(f"{url or path}: not a single array")
        # The header is read here, once: NumPy parses it with `ast`, which CPython 3.11 cannot
        # run from several threads at once (a planner samples the source on threads).
        fortran = array.flags.f_contiguous and not array.flags.c_contiguous
        self._order: Literal["C", "F"] = "F" if fortran else "C"
        self._offset = int(array.offset)
        super().__init__(url or path, array.shape, array.dtype, axes)

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        # A view of a map made for this read alone: the engine's next step (scatter, staging)
        # makes the only copy, and the map goes when the engine drops the view. A map kept
        # for the worker's life kept every page it had touched resident, and Dask counts
        # those against the worker's memory limit: the workers converting a 32 GiB .npy were
        # restarted at 7.9 GiB each, a task of 1 GiB planned.
        mapped = np.memmap(
            self.path, self._stored_dtype, "r", self._offset, self.native_shape, self._order
        )
        return mapped[slices]

    def identity(self) -> dict[str, Any]:
        return file_identity(self.path)
