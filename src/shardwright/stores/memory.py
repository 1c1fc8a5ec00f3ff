"""A store in this process's memory (memory://, fsspec's in-memory filesystem): for tests, and
for jobs whose workers are threads of this process (other processes cannot see it).

An object is assigned whole once its pieces are joined (fsspec's memory file would show a
growing object while it is written); creating one only if absent holds a process-wide lock
between the check and the assignment.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable

from shardwright.formats.shardfile import Piece, write_pieces
from shardwright.stores.base import Expected
from shardwright.stores.fsspec_store import FsspecStore

_CREATE = threading.Lock()  # memory:// is one process: a lock makes creation exclusive


class MemoryStore(FsspecStore):
    """memory://NAME: one process's objects."""

    is_process_local = True

    def _write_whole(
        self,
        key: str,
        pieces: Callable[[], Iterable[Piece]],
        expected: Expected | None,
        size: int | None = None,
    ) -> tuple[int, int]:
        # `expected` is always None here: this protocol has no conditional writes.
        buffer = io.BytesIO()
        written = write_pieces(pieces(), buffer)
        data = buffer.getvalue()
        path = self.path(key)
        self.requests.add("puts")
        self._retry(
            lambda: self.filesystem().pipe_file(path, data), f"writing {self._describe(key)}"
        )
        return written

    def create_exclusive(self, key: str, data: bytes) -> None:
        path = self.path(key)
        fs = self.filesystem()
        with _CREATE:
            if fs.exists(path):
                raise FileExistsError(path)
            fs.pipe_file(path, data)
