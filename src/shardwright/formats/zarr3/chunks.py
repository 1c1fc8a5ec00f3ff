"""The inner-chunk codec chain of a sharded Zarr v3 array, written once for both engines and
verify.

An inner chunk is a full `chunk_shape` array in C order of the output axes: at the array's
edges it is padded with the fill value, and a chunk that is entirely fill value is not stored
(readers return the fill value). Its stored bytes are ``bytes`` (little endian), then the
compressor if any, then ``crc32c`` if configured. The CPU engine takes chunks one by one
(`encode`); the batched engine tests a whole epoch of chunks at once (`present`), pads the
epoch (`pad`) and passes each kept chunk's bytes through `encode_bytes`; verify reads chunks
back (`decode`). Array steps run over an array namespace `xp` (numpy or cupy); byte steps on
the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.codecs import ByteCodec
from shardwright.common.arrays import Array, Namespace
from shardwright.formats.zarr3.metadata import ZarrArrayMetadata
from shardwright.formats.zarr3.sharding import append_crc32c, strip_crc32c

Buffer = bytes | bytearray | memoryview


def pad(xp: Namespace, block: Array, shape: Sequence[int], fill_value: Any) -> Array:
    """`block` at the corner of an array of `shape` filled with `fill_value` (the block
    itself when it has that shape already)."""
    shape = tuple(shape)
    if tuple(block.shape) == shape:
        return block
    padded = xp.full(shape, fill_value, dtype=block.dtype)
    padded[tuple(slice(0, n) for n in block.shape)] = block
    return padded


@dataclass(frozen=True)
class InnerChunkChain:
    """What a zarr3 array's metadata says of its inner chunks: their shape, little-endian
    element type and fill value, the compressor and whether a crc32c follows."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: Any
    compressor: ByteCodec | None = None
    checksum: bool = False

    @classmethod
    def of(cls, meta: ZarrArrayMetadata) -> InnerChunkChain:
        dtype = meta.dtype
        compressor = meta.compressor.codec(dtype.itemsize) if meta.compressor else None
        return cls(tuple(meta.chunk_shape), dtype, meta.fill_value, compressor, meta.checksum_inner)

    @property
    def nbytes(self) -> int:
        """Bytes of one chunk before the compressor."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def changes_bytes(self) -> bool:
        """Whether a chunk's stored bytes differ from its elements' (a compressor or crc32c)."""
        return self.compressor is not None or self.checksum

    def present(self, xp: Namespace, chunks: Array) -> Array:
        """Per chunk of `chunks` (the first axis counts them): whether it is stored, that is
        holds anything but the fill value's bits. Elements are compared as bit patterns, as
        they are stored: a chunk of -0.0 or of NaN is not the fill value 0.0, and a reader
        must get it back. The least and greatest pattern at each word of an element say it:
        two reductions with no temporary the size of the epoch, in half the time of comparing
        every element."""
        word = np.dtype(f"u{min(self.dtype.itemsize, 8)}")  # complex128: two 8-byte words
        fill = np.full(1, self.fill_value, self.dtype).view(word)
        words = chunks.astype(self.dtype, copy=False).view(word).reshape(len(chunks), -1, fill.size)
        fill_words = xp.asarray(fill)
        differs = (words.min(axis=1) != fill_words) | (words.max(axis=1) != fill_words)
        return differs.any(axis=1)

    def encode_bytes(self, data: Buffer) -> bytes:
        """A chunk's element bytes (any contiguous buffer) as stored: compressed, then followed
        by their crc32c."""
        if self.compressor is not None:
            data = self.compressor.compress(data)
        stored = bytes(data)  # no copy of what a compressor returned
        return append_crc32c(stored) if self.checksum else stored

    def decode(self, stored: bytes | memoryview | None) -> np.ndarray:
        """A stored chunk's elements (the fill value for a chunk not stored), full shape."""
        if stored is None:
            return np.full(self.shape, self.fill_value, dtype=self.dtype)
        data: Buffer = strip_crc32c(stored) if self.checksum else stored
        if self.compressor is not None:
            data = self.compressor.decompress(data)
        return np.frombuffer(data, dtype=self.dtype).reshape(self.shape)
