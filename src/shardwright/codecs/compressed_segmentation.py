"""Precomputed `compressed_segmentation`: our GIL-free C encoder, the reference library's bytes.

The reference `compressed-segmentation` library holds the GIL while it encodes, which leaves a
multi-threaded worker on one core. `_cseg.c` (built at install when a C compiler is present)
writes the same bytes with the GIL released, reading strided views without a copy; the tests
hold it byte-identical to the library, which stays the fallback and the decoder.

Each channel is encoded in blocks of `block_size` (x, y, z) voxels. The stream starts with one
uint32 per channel: the offset, in 4-byte words from the stream's start, of that channel's
data; a channel's block headers count their offsets from that channel's start, so channel
streams can be moved as they are. The library's 4-D encoder reads a fourth input stride from a
3-element array (garbage, usually a crash), so each channel is encoded by its own library call
and the streams are joined under one offset table; its 4-D decoder is sound and decodes all
channels in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import compressed_segmentation as cseg
import numpy as np
from numpy.typing import DTypeLike

from shardwright.codecs.base import (
    Buffer,
    EncodingError,
    as_xyzc,
    check_channels,
    check_dtype,
)

_cseg: ModuleType | None
try:
    from shardwright.codecs import _cseg
except ImportError:  # installed without a C compiler: the reference library encodes
    _cseg = None

CSEG_DTYPES = ("uint32", "uint64")
_WORD = 4


@dataclass(frozen=True)
class CompressedSegmentationEncoding:
    block_size: tuple[int, int, int] = (8, 8, 8)
    name: str = field(default="compressed_segmentation", init=False, repr=False)

    def __post_init__(self) -> None:
        block = tuple(int(b) for b in self.block_size)
        if len(block) != 3 or min(block) <= 0:
            raise EncodingError(
                f"compressed_segmentation block size must be 3 positive integers (x, y, z), "
                f"got {self.block_size}"
            )
        object.__setattr__(self, "block_size", block)

    def _too_large(self, shape: tuple[int, ...]) -> EncodingError:
        return EncodingError(
            f"compressed_segmentation cannot encode this {shape} chunk with block size "
            f"{self.block_size}: its label tables pass the format's 24-bit offset limit; use "
            f"smaller chunks"
        )

    def _one_channel(self, labels_xyz: np.ndarray) -> bytes:
        # The library takes a contiguous native-endian array and trusts order="F" blindly.
        native = np.asfortranarray(labels_xyz, dtype=labels_xyz.dtype.newbyteorder("="))
        try:
            return bytes(cseg.compress(native, block_size=self.block_size, order="F"))
        except OverflowError as exc:
            raise self._too_large(labels_xyz.shape) from exc

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        check_dtype("compressed_segmentation", data.dtype, CSEG_DTYPES)
        if _cseg is not None:
            if not data.dtype.isnative:
                data = data.astype(data.dtype.newbyteorder("="))
            try:
                return _cseg.compress(data, self.block_size)
            except OverflowError as exc:
                raise self._too_large(data.shape) from exc
        return self.encode_with_reference_library(data)

    def encode_with_reference_library(self, data: np.ndarray) -> bytes:
        """The reference library's bytes (one call per channel, joined under one table)."""
        channels = data.shape[3]
        if channels == 1:
            return self._one_channel(data[..., 0])
        # Each stream minus its 1-word offset table; a channel's data starts where the last ended.
        bodies = [self._one_channel(data[..., c])[_WORD:] for c in range(channels)]
        words = np.array([len(b) // _WORD for b in bodies[:-1]], dtype=np.int64)
        offsets = channels + np.concatenate(([0], np.cumsum(words)))
        if offsets[-1] >= 2**32:
            raise EncodingError("compressed_segmentation chunk passes the format's 16 GiB limit")
        return offsets.astype("<u4").tobytes() + b"".join(bodies)

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray:
        dt = np.dtype(dtype)
        check_dtype("compressed_segmentation", dt, CSEG_DTYPES)
        raw = data if isinstance(data, bytes) else bytes(data)  # the library takes bytes only
        shape = tuple(int(n) for n in shape_xyzc)
        words = len(raw) // _WORD
        if len(raw) % _WORD or words < shape[3]:
            raise EncodingError(f"compressed_segmentation chunk of {len(raw)} bytes is truncated")
        # The library does not bounds-check; catch a truncated or foreign stream here at least.
        offsets = np.frombuffer(raw, dtype="<u4", count=shape[3])
        if shape[3] and (offsets.min() < shape[3] or offsets.max() >= words):
            raise EncodingError(
                f"compressed_segmentation chunk of {len(raw)} bytes has channel offsets "
                f"{offsets.tolist()} outside it; truncated, or not {shape[3]} channel(s)"
            )
        out = cseg.decompress(raw, shape, dt, block_size=self.block_size, order="F")
        return np.asarray(out).reshape(shape, order="F")

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None:
        check_dtype("compressed_segmentation", dtype, CSEG_DTYPES)
        check_channels("compressed_segmentation", num_channels)
