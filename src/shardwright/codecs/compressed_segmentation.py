"""Precomputed `compressed_segmentation` through the reference `compressed-segmentation` library.

Each channel is encoded in blocks of `block_size` (x, y, z) voxels. The stream starts with one
uint32 per channel: the offset, in 4-byte words from the stream's start, of that channel's
data. The library is called once per channel (its multi-channel path crashes on 4-D input), and
the channel streams are joined under one offset table.
"""

from __future__ import annotations

from dataclasses import dataclass

import compressed_segmentation as cseg
import numpy as np

from shardwright.codecs.base import Buffer, as_xyzc
from shardwright.codecs.raw import check_dtype

CSEG_DTYPES = ("uint32", "uint64")
_WORD = 4
_WORD = 4


@dataclass(frozen=True)
class CompressedSegmentationEncoding:
    block_size: tuple[int, int, int] = (8, 8, 8)
    name: str = "compressed_segmentation"

    def __post_init__(self) -> None:
        block = tuple(int(b) for b in self.block_size)
        if len(block) != 3 or min(block) <= 0:
            raise ValueError(
                f"compressed_segmentation block size must be 3 positive integers, "
                f"got {self.block_size}"
            )
        object.__setattr__(self, "block_size", block)

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        channels = data.shape[3]
        if channels == 1:
            return bytes(
                cseg.compress(
                    np.asfortranarray(data[..., 0]), block_size=self.block_size, order="F"
                )
            )
        bodies = [  # each without its 1-channel offset table
            bytes(
                cseg.compress(
                    np.asfortranarray(data[..., c]), block_size=self.block_size, order="F"
                )
            )[_WORD:]
            for c in range(channels)
        ]
        sizes = np.array([0] + [len(b) // _WORD for b in bodies[:-1]], dtype=np.uint64)
        offsets = (channels + np.cumsum(sizes)).astype("<u4")
        return offsets.tobytes() + b"".join(bodies)

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray:
        raw = bytes(data)
        x, y, z, channels = shape_xyzc
        if len(raw) < _WORD * channels:
            raise ValueError(f"compressed_segmentation chunk of {len(raw)} bytes is truncated")
        offsets = np.frombuffer(raw, dtype="<u4", count=channels).astype(np.int64) * _WORD
        ends = np.append(offsets[1:], len(raw))
        out = np.empty(shape_xyzc, dtype=dtype, order="F")
        one = np.array([1], dtype="<u4").tobytes()
        for c in range(channels):
            single = one + raw[offsets[c] : ends[c]]
            out[..., c] = cseg.decompress(
                single, (x, y, z), np.dtype(dtype), block_size=self.block_size, order="F"
            )
        return out

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None:
        check_dtype("compressed_segmentation", dtype, CSEG_DTYPES)
