"""Aggregate-by-shard over an array namespace (numpy here, CuPy on GPU workers), within a
memory budget whatever the shard's size.

A batched encode leaves each epoch's encoded chunks in one device buffer at arbitrary offsets.
`EncodedChunks` keeps those buffers on the device up to its budget; beyond it, the oldest
epochs are copied out and appended to the host spool the CPU engine uses (memory, then local
disk), so a shard several times the budget holds at most the budget plus one epoch on the
device. Once every epoch is in, the shard's order is fixed (precomputed: minishard, then id;
zarr3: C order of the inner grid, both from the same host-side bookkeeping the streaming
builders use): each epoch still on the device is gathered in that order with one vectorized
gather and copied to the host once, and the shard's bytes stream out in order, a run of
neighbouring chunks of one epoch as one piece.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.common.arrays import Array, gather_segments, release_pinned, take_pinned, to_host
from shardwright.errors import ShardFormatError
from shardwright.formats.precomputed.sharding import ShardingSpec, precomputed_layout
from shardwright.formats.shardfile import Piece, ShardFile
from shardwright.formats.spool import ChunkSpool
from shardwright.formats.zarr3 import sharding as zarr3_sharding

ShardPieces = Callable[[], Iterator[Piece]]  # a shard's bytes in order; may be called again


@dataclass
class _Epoch:
    """One epoch's encoded chunks: global indices [first, first + len(sizes))."""

    first: int
    offsets: np.ndarray
    sizes: np.ndarray
    device: Array | None  # its buffer, while on the device
    spool_first: int | None = None  # spool index of its first chunk, once copied out early
    host: np.ndarray | None = None  # its chunks in the shard's order, once arranged


class EncodedChunks:
    """A shard's encoded chunks, epoch by epoch, within `device_budget` bytes on the device
    (plus the epoch being added) and `host_budget` bytes of host spool before local disk."""

    def __init__(
        self,
        xp: Any,
        device_budget: int,
        host_budget: int,
        spool_dir: str | None = None,
    ):
        self.xp = xp
        self.device_budget = device_budget
        self._spool = ChunkSpool(host_budget, spool_dir)
        self._epochs: list[_Epoch] = []
        self._on_device: list[_Epoch] = []
        self._device_bytes = 0
        self._count = 0
        self._order: np.ndarray | None = None
        self.device_peak = 0  # most bytes this shard's encoded chunks held on the device
        self.copied_out = 0  # encoded bytes copied out early to stay within the budget
        self._pinned: np.ndarray | None = None  # the host landing buffer (CuPy), until closed

    def __len__(self) -> int:
        return self._count

    def add(self, buffer: Array, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """One batch of encoded chunks (segments of `buffer`), indexed after those before."""
        sizes = np.asarray(sizes, dtype=np.int64)
        epoch = _Epoch(self._count, np.asarray(offsets, dtype=np.int64), sizes, buffer)
        self._epochs.append(epoch)
        self._on_device.append(epoch)
        self._count += len(sizes)
        self._device_bytes += int(buffer.nbytes)
        self.device_peak = max(self.device_peak, self._device_bytes)
        while self._device_bytes > self.device_budget and self._on_device:
            self._copy_out(self._on_device.pop(0))

    def sizes(self) -> np.ndarray:
        """Stored size of every chunk, by global index."""
        return np.concatenate([e.sizes for e in self._epochs]) if self._epochs else _EMPTY

    def _copy_out(self, epoch: _Epoch) -> None:
        host = to_host(epoch.device)
        self._release(epoch)
        view = host.reshape(-1).view(np.uint8).data
        first = len(self._spool)
        for start, size in zip(epoch.offsets.tolist(), epoch.sizes.tolist(), strict=True):
            self._spool.append(view[start : start + size])
        epoch.spool_first = first
        self.copied_out += int(epoch.sizes.sum())

    def _release(self, epoch: _Epoch) -> None:
        assert epoch.device is not None
        self._device_bytes -= int(epoch.device.nbytes)
        epoch.device = None

    def arrange(self, order: np.ndarray) -> ShardPieces:
        """Fix the shard's order (`order[k]`: global index of the chunk stored k-th); bring
        each epoch still on the device to the host, gathered in that order; return the
        chunk bytes in that order, as often as asked."""
        order = np.asarray(order, dtype=np.int64)
        if len(order) != self._count:
            raise ShardFormatError(f"an order of {len(order)} chunks for {self._count} chunks")
        rank = np.empty(self._count, dtype=np.int64)
        rank[order] = np.arange(self._count)
        landing = self._landing(sum(int(e.sizes.sum()) for e in self._on_device))
        for epoch in self._on_device:
            local = np.argsort(rank[epoch.first : epoch.first + len(epoch.sizes)], kind="stable")
            dense = gather_segments(self.xp, epoch.device, epoch.offsets, epoch.sizes, local)
            self.device_peak = max(self.device_peak, self._device_bytes + int(dense.nbytes))
            if landing is None:
                epoch.host = to_host(dense)
            else:
                epoch.host, landing = landing[: dense.nbytes], landing[dense.nbytes :]
                dense.get(out=epoch.host)
            del dense
            self._release(epoch)
        self._on_device = []
        self._order = order
        return self._pieces

    def _landing(self, nbytes: int) -> np.ndarray | None:
        """Under CuPy, one pinned host buffer for the epochs still on the device (at most the
        budget plus one epoch), taken from the thread's reusable ones: copies into it run at
        the bus's speed, where a fresh host array first faults in every page. Returned to the
        thread when the shard is closed, after its bytes were written."""
        if self.xp is np or nbytes == 0:
            return None
        self._pinned = take_pinned(nbytes)
        return self._pinned[:nbytes]

    def _pieces(self) -> Iterator[Piece]:
        assert self._order is not None, "arrange the chunks first"
        order = self._order
        owner = np.repeat(np.arange(len(self._epochs)), [len(e.sizes) for e in self._epochs])
        owners = owner[order]
        sizes = self.sizes()[order]
        bounds = [0, *(np.flatnonzero(np.diff(owners)) + 1).tolist(), len(order)]
        cursors = [0] * len(self._epochs)
        for lo, hi in itertools.pairwise(bounds):
            index = int(owners[lo])
            epoch = self._epochs[index]
            if epoch.host is not None:  # a run of neighbours: one piece
                nbytes = int(sizes[lo:hi].sum())
                start = cursors[index]
                cursors[index] += nbytes
                yield epoch.host.data[start : start + nbytes]
            else:
                assert epoch.spool_first is not None
                for g in order[lo:hi].tolist():
                    yield self._spool.get(epoch.spool_first + g - epoch.first)

    def close(self) -> None:
        """Release the device buffers, the host copies and the spool."""
        for epoch in self._epochs:
            epoch.device = epoch.host = None
        self._on_device = []
        self._device_bytes = 0
        self._spool.close()
        if self._pinned is not None:
            release_pinned(self._pinned)
            self._pinned = None


_EMPTY = np.zeros(0, dtype=np.int64)


def arrange_precomputed(
    spec: ShardingSpec,
    chunk_ids: np.ndarray,
    chunks: EncodedChunks,
    shard_number: int | None = None,
) -> ShardFile:
    """The shard file of `chunks` (global index i holding chunk id `chunk_ids[i]`, bytes
    already in the spec's `data_encoding`): shard index, chunk data, minishard indexes; byte
    for byte what `ShardBuilder.add_encoded` + `finish` produce. Closing it closes `chunks`."""
    sizes = np.asarray(chunks.sizes(), dtype=np.uint64)
    layout = precomputed_layout(spec, np.asarray(chunk_ids, dtype=np.uint64), sizes, shard_number)
    data = chunks.arrange(layout.order)
    return ShardFile(
        name=spec.shard_filename(layout.shard_number),
        nbytes=layout.nbytes,
        chunk_count=len(chunks),
        _pieces=lambda: itertools.chain([layout.header], data(), layout.index_blobs),
        _close=chunks.close,
    )


def arrange_zarr3(
    chunks_per_shard: Sequence[int],
    positions: np.ndarray,
    chunks: EncodedChunks,
    index_location: str = "end",
    name: str = "",
) -> ShardFile:
    """The zarr3 shard of `chunks` (`positions`: C-order linear position of each present
    inner chunk, by global index), its index first or last as `index_location` says.
    Closing it closes `chunks`."""
    sizes = np.asarray(chunks.sizes(), dtype=np.uint64)
    order, index = zarr3_sharding.shard_layout(chunks_per_shard, positions, sizes, index_location)
    data = chunks.arrange(order)
    first = index_location == "start"

    def pieces() -> Iterator[Piece]:
        if first:
            yield index
        yield from data()
        if not first:
            yield index

    return ShardFile(name, int(sizes.sum()) + len(index), len(chunks), pieces, chunks.close)
