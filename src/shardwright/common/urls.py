"""How a location string is read: its scheme, the local path it names, and the dataset
inside an HDF5 file (`file.h5#/raw`). Local names are paths, whatever they hold: a folder
named `run#2` or `what?` has no URL fragment or query."""

from __future__ import annotations

import os
import re

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def scheme_of(url: str) -> str:
    """The URL scheme (`s3`, `gs`, `file`, ...), '' for a plain path: a local folder named
    `run#2` or `what?` is a path, not a URL with a fragment or a query."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else ""


def local_path(url: str) -> str:
    """A local source or destination as a path: without `file://`, and without the
    `#/dataset` of an HDF5 file."""
    path = url[len("file://") :] if scheme_of(url) == "file" else url
    split = split_hdf5(path)
    return split[0] if split else path


def split_hdf5(url: str) -> tuple[str, str] | None:
    """(file, dataset) when `url` names a dataset inside an HDF5 file (`file.h5#/raw`): the
    part before a `#` ends in an HDF5 suffix or is an HDF5 file. None otherwise, so a `#` in a
    folder's name is only a character."""
    path = url[len("file://") :] if scheme_of(url) == "file" else url
    for index, char in enumerate(path):
        if char != "#":
            continue
        head = path[:index]
        if head.lower().endswith(HDF5_SUFFIXES) or _is_hdf5_file(head):
            return head, path[index + 1 :]
    return None


def _is_hdf5_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == HDF5_MAGIC
    except OSError:
        return False


def absolute(url: str) -> str:
    """A local path made absolute (a `file.h5#/dataset` keeps its dataset): what workers in
    other processes, started in other folders, resolve the same way. URLs, TensorStore spec
    text and `memory://` stay as they are."""
    if scheme_of(url) not in ("", "file") or url.lstrip().startswith("{"):
        return url
    path = url[len("file://") :] if scheme_of(url) == "file" else url
    split = split_hdf5(path)
    head, dataset = split if split else (path, None)
    resolved = os.path.abspath(os.path.expanduser(head))
    if head.endswith(("/", os.sep)) and not resolved.endswith(os.sep):
        resolved += os.sep
    return resolved if dataset is None else f"{resolved}#{dataset}"
