"""Volume sources behind one protocol (`Source`): a request (`request.py`), one look at its
location (`location.py`), and the first reader of the table that claims it (`readers.py`).

`open_source` validates everything it can (existence, format, axes, dataset, slice
consistency) so a bad source fails the plan, before any byte is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardwright.common.lazy import lazy_attributes
from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, Source, SourceHints
from shardwright.sources.location import look
from shardwright.sources.npy import NpySource
from shardwright.sources.readers import open_request
from shardwright.sources.request import SourceRequest

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
    "SourceRequest",
    "TensorStoreSource",
    "TiffFileSource",
    "TiffSlicesSource",
    "open_source",
]


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
    Dask, anything with shape, dtype and []). The options are `SourceRequest`'s.
    """
    if not isinstance(url, str):
        from shardwright.sources.in_memory import InMemorySource

        if isinstance(url, Source):
            return url
        SourceRequest("an array in memory", scale_key=scale_key).refuse_scales("an array in memory")
        return InMemorySource(url, axes)
    request = SourceRequest(url, axes, scale_key, storage_options, fill_missing)
    source = open_request(request, look(request))
    if source.url.startswith(url.rstrip("/") + "/") and isinstance(source, ArraySource):
        source.root = url  # the group the user named, around the array read
    return source
