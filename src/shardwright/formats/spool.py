"""Holds a shard's encoded chunks within a memory budget, spilling to local disk beyond it.

Both shard builders keep only *encoded* chunks (ARCHITECTURE invariant 2). While they fit the
budget they stay in memory; the first chunk that would exceed it moves everything to a temporary
file, so peak memory is set by the budget, never by the shard size.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np

from shardwright.errors import OptionError

DEFAULT_MEMORY_BUDGET = 256 * 1024 * 1024


class ChunkSpool:
    """Append-only store of byte blobs, addressed by insertion index."""

    def __init__(self, memory_budget: int = DEFAULT_MEMORY_BUDGET, spool_dir: str | None = None):
        if memory_budget < 0:
            raise OptionError(f"memory_budget must be >= 0, got {memory_budget}")
        self._budget = memory_budget
        self._spool_dir = spool_dir
        self._blobs: list[bytes | memoryview] = []
        self._offsets: list[int] = []
        self._sizes: list[int] = []
        self._nbytes = 0
        self._file: tempfile._TemporaryFileWrapper[bytes] | None = None

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def nbytes(self) -> int:
        """Total bytes appended."""
        return self._nbytes

    @property
    def spilled(self) -> bool:
        """Whether the blobs now live in a temporary file."""
        return self._file is not None

    def sizes(self) -> np.ndarray:
        return np.asarray(self._sizes, dtype=np.uint64)

    def append(self, blob: bytes | bytearray | memoryview) -> int:
        """Store one blob and return its index.

        Immutable blobs (bytes, read-only memoryviews) are kept as given; anything writable is
        copied, since its owner could change it before the shard is written. A read-only view
        keeps its whole buffer alive: the CPU engine's raw chunks are views of their block's
        scattered copy, which the spool then holds instead of a second copy of each chunk.
        """
        size = memoryview(blob).nbytes
        if self._file is None and self._nbytes + size > self._budget:
            self._spill()
        if self._file is None:
            if isinstance(blob, memoryview) and blob.readonly:
                self._blobs.append(blob)
            else:
                self._blobs.append(blob if isinstance(blob, bytes) else bytes(blob))
        else:
            self._file.write(blob)
        self._offsets.append(self._nbytes)
        self._sizes.append(size)
        self._nbytes += size
        return len(self._sizes) - 1

    def _spill(self) -> None:
        # Lives until close(): the spool outlives this method, so no context manager.
        self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="shardwright-spool-", dir=self._spool_dir, delete=True
        )
        for blob in self._blobs:
            self._file.write(blob)
        self._blobs = []

    def get(self, index: int) -> bytes | memoryview:
        if self._file is None:
            return self._blobs[index]
        self._file.flush()
        return os.pread(self._file.fileno(), self._sizes[index], self._offsets[index])

    def iter_in_order(self, order: np.ndarray) -> Iterator[bytes | memoryview]:
        """Yield blobs in the given index order (reads the spool file sequentially per blob)."""
        if self._file is not None:
            self._file.flush()
        for index in order.tolist():
            yield self.get(index)

    def close(self) -> None:
        """Drop the blobs and delete the spool file, if any."""
        self._blobs = []
        if self._file is not None:
            self._file.close()
            self._file = None
