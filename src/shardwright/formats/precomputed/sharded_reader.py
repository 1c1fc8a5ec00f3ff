"""Reading chunks of a `neuroglancer_uint64_sharded_v1` dataset through byte-range requests.

A chunk is found through its shard's index entry and its minishard index (both cached), and
its bytes are read in ranges: chunks stored side by side come in one request. The caller
gives the fetch function, so this module does no I/O of its own.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from shardwright.codecs import byte_codec
from shardwright.errors import ShardFormatError
from shardwright.formats.precomputed.sharding import ShardingSpec, decode_minishard_index

_U64 = np.dtype("<u8")

Fetch = Callable[[str, int, int], bytes]


class ShardedReader:
    """Reads single chunks through byte-range requests: shard index entry, minishard index, data.

    `fetch(shard_filename, start, end)` returns bytes [start, end) of that shard object and
    raises FileNotFoundError when the shard does not exist. Minishard indices are cached.
    """

    def __init__(self, spec: ShardingSpec, fetch: Fetch, cache_size: int = 1024):
        self.spec = spec
        self._fetch = fetch
        self._cache: OrderedDict[tuple[int, int], tuple[np.ndarray, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # one reader may serve several threads' reads
        self._decoder = byte_codec(spec.data_encoding) if spec.data_encoding != "raw" else None
        self.absent_shards: set[str] = set()  # shard objects found not to exist

    def _minishard(self, shard: int, minishard: int) -> tuple[np.ndarray, ...]:
        key = (shard, minishard)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        name = self.spec.shard_filename(shard)
        index: tuple[np.ndarray, ...] = (np.zeros(0, np.uint64),) * 3
        try:
            entry = self._fetch(name, 16 * minishard, 16 * minishard + 16)
        except FileNotFoundError:
            self.absent_shards.add(name)  # remembered: its other chunks cost no request
            entry = bytes(16)
        if len(entry) != 16:
            raise ShardFormatError(f"{name}: shard index entry {minishard} is truncated")
        start, end = np.frombuffer(entry, dtype=_U64).tolist()
        if start > end:
            raise ShardFormatError(f"{name}: minishard {minishard} has start > end")
        if start < end:
            base = self.spec.shard_index_nbytes
            index = decode_minishard_index(self.spec, self._fetch(name, base + start, base + end))
        with self._lock:
            self._cache[key] = index
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return index

    def locate(self, chunk_id: int) -> tuple[str, int, int] | None:
        """(shard filename, start, size) of the chunk's stored bytes, or None if absent."""
        shard, minishard = (int(v[0]) for v in self.spec.locate(np.array([chunk_id])))
        try:
            ids, starts, sizes = self._minishard(shard, minishard)
        except FileNotFoundError:
            return None
        hits = np.flatnonzero(ids == np.uint64(chunk_id))  # writers need not sort ids
        if not hits.size:
            return None
        return self.spec.shard_filename(shard), int(starts[hits[0]]), int(sizes[hits[0]])

    def read(self, chunk_id: int) -> bytes | None:
        """The chunk's payload (data_encoding undone), or None if absent."""
        return self.read_many([chunk_id])[chunk_id]

    def read_many(self, chunk_ids: Sequence[int]) -> dict[int, bytes | None]:
        """Each chunk's payload (data_encoding undone), None where absent. Chunks stored
        next to each other in one shard (a box of chunks, as writers store them) come in one
        ranged read: a gap of up to `COALESCE_GAP` bytes is read and dropped rather than
        asked for in another request."""
        out: dict[int, bytes | None] = {}
        wanted: dict[str, list[tuple[int, int, int]]] = {}
        for chunk_id in chunk_ids:
            where = self.locate(int(chunk_id))
            if where is None:
                out[int(chunk_id)] = None
            else:
                name, start, size = where
                wanted.setdefault(name, []).append((start, size, int(chunk_id)))
        for name, pieces in wanted.items():
            for first, last, run in _coalesced(sorted(pieces)):
                blob = self._fetch(name, first, last)
                if len(blob) != last - first:
                    raise ShardFormatError(
                        f"{name}: read {len(blob)} of the {last - first} bytes at {first}"
                    )
                for start, size, chunk_id in run:
                    piece = blob[start - first : start - first + size]
                    out[chunk_id] = self._decoder.decompress(piece) if self._decoder else piece
        return out


COALESCE_GAP = 1 << 16  # bytes between two chunks read rather than asked for separately
COALESCE_MOST = 64 << 20  # the longest single ranged read
COALESCE_WASTE = 1 / 8  # at most this share of a coalesced read is gaps, not chunks asked for


def _coalesced(
    pieces: list[tuple[int, int, int]],
) -> Iterator[tuple[int, int, list[tuple[int, int, int]]]]:
    """(start, size, id) pieces sorted by start, grouped into reads [first, last): a gap is
    read (one request, not two) where it is at most COALESCE_GAP bytes and the read's gaps
    stay within COALESCE_WASTE of the chunks it brings: chunks a few bytes apart come in one
    request, chunks far apart in a shard's Morton order are not read with all between."""
    run: list[tuple[int, int, int]] = []
    first = last = wanted = 0
    for piece in pieces:
        start, size, _ = piece
        gap = max(0, start - last)
        if run and (
            gap > COALESCE_GAP
            or start + size - first > COALESCE_MOST
            or (last - first - wanted) + gap > COALESCE_WASTE * (wanted + size)
        ):
            yield first, last, run
            run = []
        if not run:
            first, wanted = start, 0
        run.append(piece)
        wanted += size
        last = max(last, start + size)
    if run:
        yield first, last, run
