"""A store on this machine's disk: a plain path or file://.

An object is written under a temporary name in its own folder (named after the store's
writer, a job's run) and renamed into place, so a killed job never leaves a torn object at a
key, and the next job's holder can tell whose temporaries are stale. Creating an object only
if absent links a complete temporary into place (a link never replaces). Reads and listings go
through fsspec's local filesystem, as the other backends' do, without retries: a disk has no
transient failures worth waiting for.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from shardwright.formats.shardfile import Piece, write_pieces
from shardwright.stores.base import TMP_MARKER, Expected
from shardwright.stores.fsspec_store import FsspecStore

CREATING_MARKER = ".shardwright-creating-"  # an exclusive creation's content, linked into place
T = TypeVar("T")


class LocalStore(FsspecStore):
    """A folder on local disk."""

    is_local = True

    def _retry(self, fn: Callable[..., T], what: str) -> T:
        self._admit()
        return fn()

    def _write_whole(
        self,
        key: str,
        pieces: Callable[[], Iterable[Piece]],
        expected: Expected | None,
        size: int | None = None,
    ) -> tuple[int, int]:
        # `expected` is always None here: this protocol has no conditional writes.
        self._admit()  # writes and removals do not go through `_retry` here
        path = self.path(key)
        tmp = os.path.join(os.path.dirname(path), self._temporary_name())
        try:
            with _create(tmp) as out:
                if size:
                    _reserve(out.fileno(), size, path)
                written = write_pieces(pieces(), out)
            os.replace(tmp, path)
        except OSError as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if exc.filename is None:  # a write() that failed names no file: say which object
                raise OSError(exc.errno, exc.strerror, path) from exc
            raise
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return written

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Exactly bytes [start, end): one positioned read of an unbuffered file (a buffered
        one reads whole blocks around the range, and one more block after it)."""
        if end <= start:
            return b""
        self._admit()
        self.requests.add("gets")
        parts = []
        with open(self.path(key), "rb", buffering=0) as file:
            while start < end:
                part = os.pread(file.fileno(), end - start, start)
                if not part:  # past the end, as a ranged read of every backend returns
                    break
                parts.append(part)
                start += len(part)
        return b"".join(parts)

    def create_exclusive(self, key: str, data: bytes) -> None:
        """A complete temporary linked into place: `link` never replaces an existing file."""
        path = self.path(key)
        # Not a run's temporary: no job's cleanup may remove it while it is linked.
        tmp = os.path.join(os.path.dirname(path), f"{CREATING_MARKER}{uuid.uuid4().hex}")
        with _create(tmp) as out:
            out.write(data)
        try:
            os.link(tmp, path)
        finally:
            os.unlink(tmp)

    def delete(self, key: str) -> None:
        """Also removes the folders that removal left empty, up to the root."""
        self._admit()
        path = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        directory = os.path.dirname(path)
        while len(directory) > len(self.root) and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)  # only ever an empty folder
            except OSError:
                break
            directory = os.path.dirname(directory)

    def remove_stale_temporaries(
        self, *, nested_marker: str | None, keep_writer: str | None = None
    ) -> int:
        """Only the lease holder calls it: every other writer of this dataset is dead.
        Datasets nested inside (a volume's meshes: a folder holding `nested_marker`) have
        their own jobs: not entered."""
        if not os.path.isdir(self.root):
            return 0
        keep = f"{TMP_MARKER}{keep_writer}-" if keep_writer else None
        removed = 0
        for directory, folders, files in os.walk(self.root):
            if nested_marker is not None:
                folders[:] = [
                    f
                    for f in folders
                    if f == nested_marker
                    or not os.path.isdir(os.path.join(directory, f, nested_marker))
                ]
            for name in files:
                if name.startswith(TMP_MARKER) and not (keep and name.startswith(keep)):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except FileNotFoundError:  # its own run finished or removed it meanwhile
                        continue
                    removed += 1
        return removed

    def read_many(self, keys: Sequence[str], *, small: bool = False) -> dict[str, bytes | None]:
        """Plain reads: fsspec's per-call overhead dwarfs small objects."""
        self.requests.add("gets", len(keys))
        return {key: _read_file(self.path(key)) for key in keys}

    def first_entry(self) -> str | None:
        if not os.path.isdir(self.root):
            return self.root if os.path.lexists(self.root) else None
        for directory, _, files in os.walk(self.root):
            if files:
                return os.path.relpath(os.path.join(directory, files[0]), self.root)
        return None

    def is_file(self) -> bool:
        return os.path.isfile(self.root)


def _create(path: str) -> Any:
    """A new file opened for writing, its folder made first. Another job's release may remove
    the folder once it is empty, between the two steps: then it is made again."""
    for _ in range(10):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            return open(path, "xb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            continue
    return open(path, "xb")  # noqa: SIM115


def _reserve(fd: int, size: int, path: str) -> None:
    """Reserve `size` bytes of disk for a new file before its bytes are written: a full disk
    fails here, before a byte is written, and the filesystem allocates the object's blocks at
    once instead of one by one as they arrive (a quarter less system time for a large write
    on ext4). The file's size still grows only as bytes are written (a stopped write leaves
    no tail of zeros). Where the filesystem or system cannot reserve, the file is written as
    it comes."""
    if _FALLOCATE is None:
        return
    if _FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, 0, size) != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(code, os.strerror(code), path)


def _fallocate() -> Any:
    """Linux's fallocate(2), or None where the C library has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_FALLOC_FL_KEEP_SIZE = 1
_FALLOCATE = _fallocate()


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
