"""Which backend stores a URL: one table from the URL's protocol (as fsspec reads it; None for
a plain path) to its backend, and `open_store`, the one way to open a store.

Each entry names a function that imports its backend when first asked: a backend's module
(and the filesystems it opens: s3fs, gcsfs) loads only when a store of its kind is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fsspec

from shardwright.stores.base import Store


def _local() -> type[Store]:
    from shardwright.stores.local import LocalStore

    return LocalStore


def _memory() -> type[Store]:
    from shardwright.stores.memory import MemoryStore

    return MemoryStore


def _fsspec() -> type[Store]:
    from shardwright.stores.fsspec_store import FsspecStore

    return FsspecStore


BACKENDS: dict[str | None, Callable[[], type[Store]]] = {
    None: _local,  # a plain path
    "file": _local,
    "local": _local,
    "memory": _memory,
}
OTHERWISE: Callable[[], type[Store]] = _fsspec  # every other protocol fsspec knows: gs, s3, ...


def backend_for(url: str) -> type[Store]:
    """The backend for the URL's protocol (as fsspec reads it), else the fsspec one."""
    protocol = fsspec.core.split_protocol(url)[0]
    return BACKENDS.get(protocol, OTHERWISE)()


def open_store(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The store at `url`, opened by the backend that owns its protocol (nothing is requested
    until a first read or write)."""
    return backend_for(url)(url, storage_options)
