"""HDF5 datasets (`file.h5#/path/to/dataset`) through h5py, reading only the requested box."""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from shardwright.sources.base import ArraySource, SourceError


class Hdf5Source(ArraySource):
    def __init__(self, url: str, axes: str | None = None):
        path, _, dataset = url.partition("#")
        if not dataset:
            raise SourceError(f"{url}: name the dataset as file.h5#/path/to/dataset")
        if not os.path.isfile(path):
            raise SourceError(f"{path}: HDF5 file does not exist")
        self.path, self.dataset = path, dataset
        self._file: h5py.File | None = None
        try:
            with h5py.File(path, "r") as f:
                node = f.get(dataset)
                if not isinstance(node, h5py.Dataset):
                    raise SourceError(f"{url}: no dataset {dataset!r} in {path}")
                shape, dtype = node.shape, node.dtype
        except OSError as exc:
            raise SourceError(f"{path}: not a readable HDF5 file ({exc})") from exc
        super().__init__(url, shape, dtype, axes)

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        return np.asarray(self._file[self.dataset][slices])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None}
