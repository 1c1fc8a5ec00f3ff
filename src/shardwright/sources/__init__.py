"""Volume sources behind one protocol (`Source`): pick the reader from the URL and content."""

from __future__ import annotations

import glob
import os
from typing import Any
from urllib.parse import urlparse

from shardwright.sources.base import ArraySource, Source, SourceError, SourceHints
from shardwright.sources.hdf5 import Hdf5Source
from shardwright.sources.npy import NpySource
from shardwright.sources.precomputed import open_precomputed
from shardwright.sources.tensorstore_array import TensorStoreSource, read_json
from shardwright.sources.tiff import TIFF_SUFFIXES, TiffFileSource, TiffSlicesSource
from shardwright.sources.zarr import open_zarr

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")

__all__ = [
    "ArraySource",
    "Hdf5Source",
    "NpySource",
    "Source",
    "SourceError",
    "SourceHints",
    "TensorStoreSource",
    "TiffFileSource",
    "TiffSlicesSource",
    "open_source",
]


def open_source(
    url: str,
    *,
    axes: str | None = None,
    scale_key: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Source:
    """Open a volume by URL: .npy, zarr (v2, v3, OME-Zarr), precomputed, TIFF, HDF5."""
    scheme = urlparse(url).scheme
    if scheme in ("gs", "s3"):
        return _open_directory_like(url, axes, scale_key, storage_options)
    path = url[len("file://") :] if scheme == "file" else url
    file_part = path.partition("#")[0]
    if file_part.lower().endswith(HDF5_SUFFIXES):
        return Hdf5Source(path, axes)
    if any(ch in path for ch in "*?[") and not os.path.exists(path):
        if not glob.glob(path):
            raise SourceError(f"{url}: the pattern matches no files")
        return TiffSlicesSource(path, axes)
    if not os.path.exists(path):
        raise SourceError(f"{url}: source does not exist")
    if os.path.isfile(path):
        lower = path.lower()
        if lower.endswith(".npy"):
            return NpySource(path, axes)
        if lower.endswith(TIFF_SUFFIXES):
            return TiffFileSource(path, axes)
        raise SourceError(
            f"{url}: unknown source format (expected .npy, .tif/.tiff, "
            ".h5#/dataset, a zarr array or a precomputed volume)"
        )
    if any(n.lower().endswith(TIFF_SUFFIXES) for n in os.listdir(path)) and not any(
        os.path.exists(os.path.join(path, marker))
        for marker in ("info", "zarr.json", ".zarray", ".zgroup")
    ):
        return TiffSlicesSource(path, axes)
    return _open_directory_like(path, axes, scale_key, storage_options)


def _open_directory_like(
    url: str, axes: str | None, scale_key: str | None, storage_options: dict[str, Any] | None
) -> Source:
    if read_json(url, "info", storage_options) is not None:
        if axes not in (None, "xyzc"):
            raise SourceError(
                f"{url}: a precomputed volume is x,y,z,c; --source-axes does not apply"
            )
        return open_precomputed(url, scale_key, storage_options)
    if any(
        read_json(url, key, storage_options) is not None
        for key in ("zarr.json", ".zarray", ".zgroup")
    ):
        return open_zarr(url, axes, scale_key, storage_options=storage_options)
    raise SourceError(
        f"{url}: unknown source format (no precomputed info, zarr.json, .zarray "
        "or TIFF slices found)"
    )
