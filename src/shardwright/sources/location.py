"""What is at a source's URL, looked at once: the kind of place it is and the metadata
documents found there, each read once, through the project's own stores.

A local directory is listed once and only the metadata files it holds are read. An object
store's prefix is not listed (a zarr v2 array keeps its chunks beside its `.zarray`: a
listing can be a million keys); its metadata names are read in one concurrent batch
instead, an absent one answering "not found". Every reader decides from this one look.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from shardwright.common.urls import HDF5_SUFFIXES, scheme_of, split_hdf5
from shardwright.errors import SourceError
from shardwright.sources.base import json_object
from shardwright.sources.kinds import REMOTE_SCHEMES, TIFF_SUFFIXES
from shardwright.sources.request import SourceRequest

FORMATS = (
    "expected a .npy file, a .tif/.tiff stack, a directory or glob of TIFF slices, "
    "file.h5#/dataset, a zarr array or OME-Zarr group, an N5 dataset, a precomputed volume, "
    "or a TensorStore spec (.json)"
)
ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup")
N5_MARKER = "attributes.json"
# The names a user may give for the metadata file itself, meaning the folder around it.
MARKERS = ("info", *ZARR_MARKERS, N5_MARKER)
# Every metadata document a reader here may need at a node, read together.
DOCUMENTS = (*MARKERS, ".zattrs")

Kind = Literal["spec", "hdf5", "pattern", "file", "directory", "prefix"]


@dataclass(frozen=True)
class Location:
    """One look at a URL. `path`: the local path (None on an object store); `entries`: a
    local directory's names; `head`: a local file's first bytes; `documents`: the metadata
    objects present, as stored."""

    url: str
    kind: Kind
    path: str | None = None
    entries: tuple[str, ...] = ()
    head: bytes = b""
    documents: Mapping[str, bytes] = field(default_factory=dict)

    def has(self, *names: str) -> bool:
        return any(name in self.documents for name in names)

    def document(self, name: str) -> dict[str, Any] | None:
        """A metadata document parsed (a JSON object), None where absent."""
        data = self.documents.get(name)
        return None if data is None else json_object(data, f"{self.url.rstrip('/')}/{name}")


def look(request: SourceRequest) -> Location:
    """The one look every reader decides from; a place no reader can be at (a missing
    path, a scheme nothing reads, a file kind only read from local disk) is refused here."""
    url = request.url
    scheme = scheme_of(url)
    if url.lstrip().startswith("{") or (
        url.lower().endswith(".json") and os.path.basename(url) not in MARKERS
    ):
        return Location(url, "spec")
    if scheme in REMOTE_SCHEMES:
        if url.partition("#")[0].lower().endswith((".npy", *TIFF_SUFFIXES, *HDF5_SUFFIXES)):
            raise SourceError(
                f"{url}: only zarr, N5 and precomputed sources can be read from {scheme}:// "
                "(copy .npy, TIFF and HDF5 files to local disk first)"
            )
        return look_at_node(url, request.storage_options)
    if scheme not in ("", "file"):
        raise SourceError(f"{url}: unsupported URL scheme {scheme}:// ({FORMATS})")
    path = url[len("file://") :] if scheme == "file" else url
    if split_hdf5(path) is not None or path.lower().endswith(HDF5_SUFFIXES):
        return Location(url, "hdf5", path)
    if any(ch in path for ch in "*?[") and not os.path.exists(path):
        if not glob.glob(path):
            raise SourceError(f"{url}: the pattern matches no files")
        return Location(url, "pattern", path)
    if not os.path.exists(path):
        raise SourceError(f"{url}: source does not exist")
    if os.path.isdir(path):
        return _local_directory(url, path)
    if os.path.basename(path) in MARKERS:  # the user named the metadata file itself
        folder = os.path.dirname(path)
        return _local_directory(folder or ".", folder or ".")
    return Location(url, "file", path, head=_head(path))


def look_at_node(
    url: str, storage_options: dict[str, Any] | None, names: Sequence[str] = DOCUMENTS
) -> Location:
    """A node of a hierarchy (zarr, N5, precomputed) on an object store or on disk: its
    metadata documents (of `names`, where the caller knows which kind of node it expects),
    read in one batch."""
    from shardwright.stores import open_store

    scheme = scheme_of(url)
    if scheme in ("", "file"):
        path = url[len("file://") :] if scheme == "file" else url
        return _local_directory(url, path) if os.path.isdir(path) else Location(url, "directory")
    found = open_store(url, storage_options).read_many(list(names), small=True)
    present = {name: data for name, data in found.items() if data is not None}
    return Location(url, "prefix", documents=present)


def _local_directory(url: str, path: str) -> Location:
    try:
        entries = tuple(sorted(os.listdir(path)))
    except OSError as exc:
        raise SourceError(f"{url}: cannot list ({exc})") from exc
    documents = {}
    for name in DOCUMENTS:
        if name in entries and os.path.isfile(os.path.join(path, name)):
            documents[name] = _read(url, os.path.join(path, name))
    return Location(url, "directory", path, entries, documents=documents)


def _read(url: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SourceError(f"{url}: cannot read {os.path.basename(path)} ({exc})") from exc


def _head(path: str) -> bytes:
    """A file's leading bytes, by which its format is told where its name does not say."""
    try:
        with open(path, "rb") as f:
            return f.read(8)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc})") from exc
