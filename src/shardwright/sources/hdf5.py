"""HDF5 datasets (`file.h5#/path/to/dataset`) through h5py, reading only the requested box."""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from shardwright.common.urls import split_hdf5
from shardwright.errors import SourceError
from shardwright.sources.base import (
    ArraySource,
    SourceHints,
    axes_from_names,
    file_identity,
    resolution_in_array_order,
)


class Hdf5Source(ArraySource):
    """One dataset; h5py slicing reads only the chunks (or rows) the box touches."""

    def __init__(self, url: str, axes: str | None = None):
        path, dataset = split_hdf5(url) or (url.removeprefix("file://"), "")
        if not os.path.exists(path):
            raise SourceError(f"{url}: HDF5 file {path} does not exist")
        if not dataset.strip("/"):
            raise SourceError(
                f"{url}: name the dataset inside the HDF5 file as {path}#/path/to/dataset"
            )
        self.path, self.dataset = path, dataset
        self._file: h5py.File | None = None
        try:
            with h5py.File(path, "r") as f:
                node = f.get(dataset)
                if not isinstance(node, h5py.Dataset):
                    found = "a group" if isinstance(node, h5py.Group) else "nothing"
                    raise SourceError(
                        f"{url}: no dataset {dataset!r} in {path} ({found} at that path; "
                        f"datasets: {', '.join(_datasets(f)[:10]) or 'none'})"
                    )
                shape, dtype = node.shape, node.dtype
                labels = [dim.label for dim in node.dims]  # h5py dimension labels, if set
                attributes = dict(node.attrs)
        except OSError as exc:
            raise SourceError(f"{url}: not a readable HDF5 file ({exc})") from exc
        super().__init__(url, shape, dtype, axes, detected_axes=axes_from_names(labels))
        voxel_size = _voxel_size(attributes, self.axes)
        self.hints = SourceHints(
            voxel_size, placed_by="its HDF5 attributes" if voxel_size else None
        )

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        return np.asarray(self._file[self.dataset][slices])

    def identity(self) -> dict[str, Any]:
        return {**file_identity(self.path), "dataset": self.dataset}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None}


# Voxel-size attributes of a dataset, per spatial axis in array order, and nm per their unit:
# `resolution` in nm (CREMI and connectomics pipelines), `element_size_um` (ilastik, Fiji).
VOXEL_SIZE_ATTRIBUTES = (("resolution", 1.0), ("element_size_um", 1000.0))


def _voxel_size(attributes: dict[str, Any], axes: str) -> tuple[float, float, float] | None:
    for name, nm_per_unit in VOXEL_SIZE_ATTRIBUTES:
        if name in attributes:
            found = resolution_in_array_order(axes, attributes[name], nm_per_unit)
            if found is not None:
                return found
    return None


def _datasets(f: h5py.File) -> list[str]:
    """Dataset paths in the file, to suggest one when the named one is missing."""
    names: list[str] = []

    def visit(name: str, node: Any) -> None:
        if isinstance(node, h5py.Dataset):
            names.append("/" + name)

    f.visititems(visit)
    return names
