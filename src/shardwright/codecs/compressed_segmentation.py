"""Precomputed `compressed_segmentation` through the reference `compressed-segmentation` library.

Each channel is encoded in blocks of `block_size` (x, y, z) voxels; the library is called once
per chunk on the [x, y, z, c] array in Fortran order, which is the layout the format defines.
"""

from __future__ import annotations

from dataclasses import dataclass

import compressed_segmentation as cseg
import numpy as np

from shardwright.codecs.base import Buffer, as_xyzc
from shardwright.codecs.raw import check_dtype

CSEG_DTYPES = ("uint32", "uint64")


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
        data = np.asfortranarray(as_xyzc(chunk))
        return bytes(cseg.compress(data, block_size=self.block_size, order="F"))

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray:
        out = cseg.decompress(
            bytes(data), tuple(shape_xyzc), np.dtype(dtype), block_size=self.block_size, order="F"
        )
        return np.asarray(out).reshape(shape_xyzc, order="F")

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None:
        check_dtype("compressed_segmentation", dtype, CSEG_DTYPES)
