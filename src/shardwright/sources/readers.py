"""The readers, one table: what each claims from a location's one look, and how it opens.

The first reader that claims a location opens it, so the table's order is the order of
precedence (a folder holding an `info` and TIFF files is a precomputed volume). Each opener
imports its reader's module (and the library behind it: h5py, tifffile, tensorstore) only
when it is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardwright.common.urls import HDF5_MAGIC
from shardwright.errors import SourceError
from shardwright.sources.base import Source
from shardwright.sources.kinds import TIFF_SUFFIXES, is_tiff_name
from shardwright.sources.location import FORMATS, N5_MARKER, ZARR_MARKERS, Location
from shardwright.sources.request import SourceRequest

# Leading bytes of the file formats read here, for files whose name does not say.
MAGIC = {b"\x93NUMPY": "npy", b"II*\x00": "tiff", b"MM\x00*": "tiff", b"II+\x00": "tiff",
         b"MM\x00+": "tiff", HDF5_MAGIC: "hdf5"}  # fmt: skip


@dataclass(frozen=True)
class Reader:
    """One kind of source. `name` says what it reads (in messages); a reader without scales
    refuses a `scale_key` before it opens anything."""

    name: str
    claims: Callable[[Location], bool]
    opens: Callable[[SourceRequest, Location], Source]
    has_scales: bool = False


def file_kind(location: Location) -> str | None:
    """npy / tiff / hdf5 for a local file: by its suffix, else by its leading bytes."""
    if location.kind != "file" or location.path is None:
        return None
    lower = location.path.lower()
    if lower.endswith(".npy"):
        return "npy"
    if lower.endswith(TIFF_SUFFIXES):
        return "tiff"
    return next((kind for magic, kind in MAGIC.items() if location.head.startswith(magic)), None)


def _spec(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.spec import open_spec

    return open_spec(request)


def _hdf5(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.hdf5 import Hdf5Source

    return Hdf5Source(request.url, request.axes)


def _precomputed(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.precomputed import open_precomputed

    return open_precomputed(request, location)


def _zarr(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.zarr import open_zarr

    return open_zarr(request, location)


def _n5(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.n5 import open_n5

    return open_n5(request, location)


def _tiff_slices(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.tiff import TiffSlicesSource

    assert location.path is not None
    return TiffSlicesSource(
        location.path, request.axes, url=request.url, fill_missing=request.fill_missing
    )


def _npy(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.npy import NpySource

    assert location.path is not None
    return NpySource(location.path, request.axes, url=request.url)


def _tiff_file(request: SourceRequest, location: Location) -> Source:
    from shardwright.sources.tiff import TiffFileSource

    assert location.path is not None
    return TiffFileSource(location.path, request.axes, url=request.url)


READERS = (
    Reader("a TensorStore spec", lambda at: at.kind == "spec", _spec, has_scales=True),
    Reader("an HDF5 dataset", lambda at: at.kind == "hdf5", _hdf5),
    Reader("a precomputed volume", lambda at: at.has("info"), _precomputed, has_scales=True),
    Reader("a zarr array or group", lambda at: at.has(*ZARR_MARKERS), _zarr, has_scales=True),
    Reader("an N5 dataset or group", lambda at: at.has(N5_MARKER), _n5, has_scales=True),
    Reader(
        "TIFF slices",
        lambda at: (
            at.kind == "pattern"
            or (at.kind == "directory" and any(is_tiff_name(n) for n in at.entries))
        ),
        _tiff_slices,
    ),
    Reader("a .npy array", lambda at: file_kind(at) == "npy", _npy),
    Reader("a TIFF stack", lambda at: file_kind(at) == "tiff", _tiff_file),
)


def open_request(request: SourceRequest, location: Location) -> Source:
    """The source the first claiming reader opens; one line naming what is there where no
    reader claims it."""
    for reader in READERS:
        if reader.claims(location):
            if not reader.has_scales:
                request.refuse_scales(reader.name)
            return reader.opens(request, location)
    raise SourceError(_unclaimed(location))


def _unclaimed(location: Location) -> str:
    url = location.url
    if file_kind(location) == "hdf5":
        return f"{url}: an HDF5 file; name the dataset as {location.path}#/path/to/dataset"
    if location.kind == "directory" and not location.entries:
        return f"{url}: unknown source format: the directory is empty ({FORMATS})"
    if location.kind == "directory":
        return (
            f"{url}: unknown source format: the directory holds neither a precomputed info, "
            "zarr.json, .zarray, .zgroup nor N5 attributes.json, nor TIFF slices"
        )
    if location.kind == "prefix":
        return (
            f"{url}: unknown source format: no precomputed info, zarr.json, .zarray, .zgroup "
            "or N5 attributes.json found there"
        )
    return f"{url}: unknown source format ({FORMATS})"
