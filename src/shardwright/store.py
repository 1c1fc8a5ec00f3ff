"""Whole-object writes and ranged reads on a destination (local disk, memory://, and fsspec URLs).

Every object is written once and whole (ARCHITECTURE invariant 1). On local disk an object is
written under a temporary name in its own directory and renamed into place, so a killed job
never leaves a torn object at a shard's key; object stores make a single PUT visible atomically.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from typing import Any

import fsspec
import google_crc32c

from shardwright.formats.shardfile import Piece

TMP_MARKER = ".shardwright-tmp-"


class StoreError(OSError):
    """A destination that cannot be used, with the URL (never credentials) in the message."""


def _as_bytes(piece: Piece) -> bytes:
    return piece if isinstance(piece, bytes) else bytes(piece)


class Store:
    """A dataset root: keys are '/'-separated paths below it."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        return self._fs

    @property
    def root(self) -> str:
        self.fs  # noqa: B018 - resolves the root as a side effect
        assert self._root is not None
        return self._root.rstrip("/")

    @property
    def is_local(self) -> bool:
        return "file" in _protocols(self.fs)

    @property
    def is_process_local(self) -> bool:
        """memory:// lives in one process: other Dask worker processes cannot see it."""
        return "memory" in _protocols(self.fs)

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    # -- writes -----------------------------------------------------------------------------
    def write_object(self, key: str, data: bytes | Iterable[Piece]) -> tuple[int, int]:
        """Write one whole object; returns (size, crc32c). Never leaves a partial object at key."""
        pieces: Iterable[Piece] = (
            [data] if isinstance(data, bytes | bytearray | memoryview) else data
        )
        path = self.path(key)
        size = crc = 0
        if self.is_local:
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, f"{TMP_MARKER}{uuid.uuid4().hex}")
            try:
                with open(tmp, "wb") as out:
                    for piece in pieces:
                        out.write(piece)
                        size += len(piece)
                        crc = google_crc32c.extend(crc, _as_bytes(piece))
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return size, crc
        with self.fs.open(path, "wb") as out:
            for piece in pieces:
                out.write(piece)
                size += len(piece)
                crc = google_crc32c.extend(crc, _as_bytes(piece))
        return size, crc

    def write_text(self, key: str, text: str) -> None:
        self.write_object(key, text.encode())

    # -- reads ------------------------------------------------------------------------------
    def read(self, key: str) -> bytes:
        return bytes(self.fs.cat_file(self.path(key)))

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object; FileNotFoundError if it does not exist."""
        if end <= start:
            return b""
        return bytes(self.fs.cat_file(self.path(key), start=start, end=end))

    def size(self, key: str) -> int | None:
        try:
            return int(self.fs.size(self.path(key)))
        except FileNotFoundError:
            return None

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every object key below `prefix` (recursive), relative to the root."""
        base = self.path(prefix).rstrip("/")
        if not self.fs.exists(base):
            return []
        root = self.root + "/"
        return sorted(
            p[len(root) :] if p.startswith(root) else p
            for p in self.fs.find(base)
            if TMP_MARKER not in p
        )

    def is_empty(self) -> bool:
        return not self.fs.exists(self.root) or not self.list_keys()

    def clear(self) -> None:
        """Remove everything below the root (used by --overwrite, after validation)."""
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)

    def remove_stale_temporaries(self) -> int:
        """Delete temporary files a killed job left behind; returns how many."""
        if not self.is_local or not os.path.isdir(self.root):
            return 0
        removed = 0
        for directory, _, files in os.walk(self.root):
            for name in files:
                if name.startswith(TMP_MARKER):
                    os.unlink(os.path.join(directory, name))
                    removed += 1
        return removed


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
