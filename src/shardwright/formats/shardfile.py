"""A finished shard object as an ordered list of byte pieces, ready to be written once.

The builders never concatenate a shard in memory: a shard file is its header/index pieces plus
the chunk blobs in their final order, pulled from the spool as they are written. `to_bytes()`
exists for small shards and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import crc32c

Piece = bytes | bytearray | memoryview


def write_pieces(pieces: Iterable[Piece], out: BinaryIO | None) -> tuple[int, int]:
    """Write pieces in order to `out` (None: only measure); returns (size, crc32c)."""
    size = crc = 0
    for piece in pieces:
        if out is not None:
            out.write(piece)
        size += len(piece)
        crc = crc32c.crc32c(piece, crc)  # any buffer, no copy
    return size, crc


@dataclass
class ShardFile:
    """One complete shard object: its key, size, chunk count and a way to stream its bytes."""

    name: str
    nbytes: int
    chunk_count: int
    _pieces: Callable[[], Iterable[Piece]]
    _close: Callable[[], None] = lambda: None

    def pieces(self) -> Iterator[Piece]:
        """Yield the object's bytes in order; may be called more than once."""
        yield from self._pieces()

    def write_to(self, out: BinaryIO) -> int:
        """Write the whole object to `out` and return its crc32c."""
        return write_pieces(self.pieces(), out)[1]

    def crc32c(self) -> int:
        return write_pieces(self.pieces(), None)[1]

    def to_bytes(self) -> bytes:
        data = b"".join(self.pieces())
        if len(data) != self.nbytes:
            raise AssertionError(
                f"shard {self.name}: assembled {len(data)} bytes, expected {self.nbytes}"
            )
        return data

    def close(self) -> None:
        """Release the spool behind this shard."""
        self._close()
