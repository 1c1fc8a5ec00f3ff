"""Volume sources behind one protocol (`Source`): pick the reader from the URL and content.

`open_source` validates everything it can (existence, format, axes, dataset, slice
consistency) so a bad source fails the plan, before any byte is written.
"""

from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING, Any

from shardwright.errors import SourceError
from shardwright.lazy import lazy_attributes
from shardwright.sources.base import ArraySource, Source, SourceHints
from shardwright.sources.kinds import REMOTE_SCHEMES, TIFF_SUFFIXES, is_tiff_name
from shardwright.sources.npy import NpySource
from shardwright.urls import HDF5_MAGIC, HDF5_SUFFIXES, scheme_of, split_hdf5

if TYPE_CHECKING:
    from shardwright.sources.hdf5 import Hdf5Source
    from shardwright.sources.tensorstore_array import TensorStoreSource
    from shardwright.sources.tiff import TiffFileSource, TiffSlicesSource

# Readers that import a heavy library (h5py, tifffile, tensorstore) load on first use.
_LAZY = {
    "Hdf5Source": "hdf5",
    "TensorStoreSource": "tensorstore_array",
    "TiffFileSource": "tiff",
    "TiffSlicesSource": "tiff",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


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

FORMATS = (
    "expected a .npy file, a .tif/.tiff stack, a directory or glob of TIFF slices, "
    "file.h5#/dataset, a zarr array or OME-Zarr group, an N5 dataset, a precomputed volume, "
    "or a TensorStore spec (.json)"
)
ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup")
N5_MARKER = "attributes.json"
METADATA_FILES = ("info", *ZARR_MARKERS, N5_MARKER)
# Leading bytes of the file formats read here, for files whose name does not say.
MAGIC = {b"\x93NUMPY": "npy", b"II*\x00": "tiff", b"MM\x00*": "tiff", b"II+\x00": "tiff",
         b"MM\x00+": "tiff", HDF5_MAGIC: "hdf5"}  # fmt: skip


def open_source(
    url: str | Any,
    *,
    axes: str | None = None,
    scale_key: str | None = None,
    storage_options: dict[str, Any] | None = None,
    fill_missing: bool = False,
) -> Source:
    """Open a volume: .npy, zarr (v2, v3, OME-Zarr), N5, precomputed, TIFF, HDF5, a
    TensorStore spec (a .json file or the JSON text itself), or an array in memory (NumPy,
    Dask, anything with shape, dtype and []).

    `axes` gives the array's own axis order (default C-order z,y,x or c,z,y,x, or what the
    metadata names); `scale_key` picks a precomputed scale, OME-Zarr dataset or N5 scale;
    `storage_options` (fsspec-style: endpoint_url, ...) apply to gs:// and s3:// URLs;
    `fill_missing` writes the fill value where a precomputed chunk or a TIFF slice is absent
    instead of refusing.
    """
    if not isinstance(url, str):
        from shardwright.sources.in_memory import InMemorySource

        if isinstance(url, Source):
            return url
        _no_scales("an array in memory", scale_key, "an array in memory")
        return InMemorySource(url, axes)
    source = _open(url, axes, scale_key, storage_options, fill_missing)
    if source.url.startswith(url.rstrip("/") + "/") and isinstance(source, ArraySource):
        source.root = url  # the group the user named, around the array read
    return source


def _open(
    url: str,
    axes: str | None,
    scale_key: str | None,
    storage_options: dict[str, Any] | None,
    fill_missing: bool,
) -> Source:
    scheme = scheme_of(url)
    if (
        url.lstrip().startswith("{")
        or url.lower().endswith(".json")
        and (os.path.basename(url) not in METADATA_FILES)
    ):
        from shardwright.sources.spec import open_spec

        return open_spec(url, axes, scale_key, storage_options)
    if scheme in REMOTE_SCHEMES:
        if url.partition("#")[0].lower().endswith((".npy", *TIFF_SUFFIXES, *HDF5_SUFFIXES)):
            raise SourceError(
                f"{url}: only zarr, N5 and precomputed sources can be read from {scheme}:// "
                "(copy .npy, TIFF and HDF5 files to local disk first)"
            )
        return _open_directory_like(url, axes, scale_key, storage_options, fill_missing)
    if scheme not in ("", "file"):
        raise SourceError(f"{url}: unsupported URL scheme {scheme}:// ({FORMATS})")
    path = url[len("file://") :] if scheme == "file" else url
    if split_hdf5(path) is not None or path.lower().endswith(HDF5_SUFFIXES):
        _no_scales(url, scale_key, "an HDF5 dataset")
        from shardwright.sources.hdf5 import Hdf5Source

        return Hdf5Source(url, axes)
    if any(ch in path for ch in "*?[") and not os.path.exists(path):
        if not glob.glob(path):
            raise SourceError(f"{url}: the pattern matches no files")
        _no_scales(url, scale_key, "TIFF slices")
        from shardwright.sources.tiff import TiffSlicesSource

        return TiffSlicesSource(path, axes, url=url, fill_missing=fill_missing)
    if not os.path.exists(path):
        raise SourceError(f"{url}: source does not exist")
    if os.path.isdir(path):
        return _open_directory(url, path, axes, scale_key, storage_options, fill_missing)
    if os.path.basename(path) in METADATA_FILES:  # the user named the metadata file itself
        return _open_directory_like(
            os.path.dirname(path), axes, scale_key, storage_options, fill_missing
        )
    kind = _file_kind(path)
    if kind == "npy":
        _no_scales(url, scale_key, "a .npy array")
        return NpySource(path, axes, url=url)
    if kind == "tiff":
        _no_scales(url, scale_key, "a TIFF stack")
        from shardwright.sources.tiff import TiffFileSource

        return TiffFileSource(path, axes, url=url)
    if kind == "hdf5":
        raise SourceError(f"{url}: an HDF5 file; name the dataset as {path}#/path/to/dataset")
    raise SourceError(f"{url}: unknown source format ({FORMATS})")


def _file_kind(path: str) -> str | None:
    """npy / tiff / hdf5 by extension, else by the file's leading bytes."""
    lower = path.lower()
    if lower.endswith(".npy"):
        return "npy"
    if lower.endswith(TIFF_SUFFIXES):
        return "tiff"
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc})") from exc
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def _open_directory(
    url: str,
    path: str,
    axes: str | None,
    scale_key: str | None,
    storage_options: dict[str, Any] | None,
    fill_missing: bool,
) -> Source:
    """A local directory: precomputed, zarr, N5, or a stack of TIFF slices."""
    if any(os.path.exists(os.path.join(path, m)) for m in METADATA_FILES):
        return _open_directory_like(url, axes, scale_key, storage_options, fill_missing)
    names = os.listdir(path)
    if any(is_tiff_name(n) for n in names):
        _no_scales(url, scale_key, "TIFF slices")
        from shardwright.sources.tiff import TiffSlicesSource

        return TiffSlicesSource(path, axes, url=url, fill_missing=fill_missing)
    if not names:
        raise SourceError(f"{url}: unknown source format: the directory is empty ({FORMATS})")
    raise SourceError(
        f"{url}: unknown source format: the directory holds neither a precomputed info, "
        "zarr.json, .zarray, .zgroup nor N5 attributes.json, nor TIFF slices"
    )


def _open_directory_like(
    url: str,
    axes: str | None,
    scale_key: str | None,
    storage_options: dict[str, Any] | None,
    fill_missing: bool,
) -> Source:
    """A precomputed volume, zarr node or N5 dataset, local or in an object store."""
    from shardwright.sources.n5 import open_n5
    from shardwright.sources.precomputed import open_precomputed
    from shardwright.sources.tensorstore_array import read_json
    from shardwright.sources.zarr import open_zarr

    if read_json(url, "info", storage_options) is not None:
        return open_precomputed(url, scale_key, storage_options, axes, fill_missing)
    if any(read_json(url, key, storage_options) is not None for key in ZARR_MARKERS):
        return open_zarr(url, axes, scale_key, storage_options=storage_options)
    attributes = read_json(url, N5_MARKER, storage_options)
    if attributes is not None:
        return open_n5(url, attributes, axes, scale_key, storage_options)
    raise SourceError(
        f"{url}: unknown source format: no precomputed info, zarr.json, .zarray, .zgroup "
        "or N5 attributes.json found there"
    )


def _no_scales(url: str, scale_key: str | None, what: str) -> None:
    if scale_key is not None:
        raise SourceError(
            f"{url}: {what} has no scales; scale_key applies to precomputed and OME-Zarr sources"
        )
