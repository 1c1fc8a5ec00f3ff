"""Chunks fetched once for a run of box reads that share them.

A group of mesh blocks is read block after block, each box one voxel larger than its block on
the high sides: a chunk at a block's high face is read again by the next block. Within
`reusing(source, uses)`, the source keeps such a chunk's stored bytes from its first fetch
to its last use (`uses`: how many of the run's reads will ask for it) and drops it then, so
it holds at most the chunks fetched but still to be asked for again (a layer of the group).
Bytes are kept as stored (compressed), decoded by each read. Per thread: the worker's other
tasks read as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardwright.sources.base import ArraySource

Coord = tuple[int, int, int]
Fetch = Callable[[list[Coord]], list[bytes | None]]

_active = threading.local()


class ChunkReuse:
    """The chunks a run of reads asks for, and those fetched that it will ask for again."""

    def __init__(self, uses: Counter[Coord]) -> None:
        self.uses = uses
        self.kept: dict[Coord, bytes | None] = {}
        self.fetched = 0  # chunks fetched from the store (what the run read)

    def take(self, coords: Sequence[Coord], fetch: Fetch) -> list[bytes | None]:
        """Each chunk's stored bytes (None where absent): kept ones, the rest fetched in one
        batch."""
        wanted = [c for c in coords if c not in self.kept]
        fetched = dict(zip(wanted, fetch(wanted), strict=True)) if wanted else {}
        self.fetched += len(wanted)
        out = []
        for coord in coords:
            data = self.kept.pop(coord) if coord in self.kept else fetched[coord]
            self.uses[coord] -= 1
            if self.uses[coord] > 0:
                self.kept[coord] = data
            out.append(data)
        return out


@contextlib.contextmanager
def reusing(source: Any, uses: Counter[Coord]) -> Iterator[ChunkReuse]:
    """Within, this thread's reads of `source` fetch each chunk of `uses` once."""
    reuse = ChunkReuse(uses)
    previous = getattr(_active, "entry", None)
    _active.entry = (source, reuse)
    try:
        yield reuse
    finally:
        _active.entry = previous


def reusing_reads(
    source: Any, boxes: Sequence[tuple[Coord, Coord]]
) -> contextlib.AbstractContextManager[object]:
    """Within, this thread's reads of `boxes` (in order) fetch each stored chunk once where
    `source` can keep one (a source of the package's own: `ArraySource.reusing`); any other
    source (a user's object read through the `Source` protocol) reads as it does."""
    return source.reusing(boxes) if isinstance(source, ArraySource) else contextlib.nullcontext()


def active_for(source: Any) -> ChunkReuse | None:
    """The reuse this thread has for `source`, if any."""
    entry = getattr(_active, "entry", None)
    return entry[1] if entry is not None and entry[0] is source else None
