"""Precomputed `raw`: little-endian voxels in [x, y, z, c] Fortran order, no header."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import DTypeLike

from shardwright.codecs.base import Buffer, as_xyzc, check_channels, check_dtype
from shardwright.errors import EncodingError

# The data types TensorStore's neuroglancer_precomputed driver accepts (no int64, no float64).
RAW_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")


@dataclass(frozen=True)
class RawEncoding:
    name: str = field(default="raw", init=False, repr=False)

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        little = data.dtype.newbyteorder("<")
        if data.dtype != little:  # big-endian input, rare: swap, then gather
            data = data.astype(little, order="F")
        # One copy: tobytes(order="F") gathers any strided view straight into the output.
        return data.tobytes(order="F")

    def encoded_view(self, chunk: np.ndarray) -> Buffer:
        """`encode`'s bytes as a read-only view of `chunk`, without a copy, when the chunk is
        already laid out as the encoding stores it (read-only, Fortran-contiguous [x, y, z, c],
        little-endian: the CPU engine's scattered chunks); otherwise `encode`."""
        data = as_xyzc(chunk)
        if (
            data.flags.f_contiguous
            and not data.flags.writeable
            and data.dtype == data.dtype.newbyteorder("<")
        ):
            return memoryview(data.reshape(-1, order="F").view(np.uint8).data)
        return self.encode(chunk)

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray:
        """A read-only [x, y, z, c] view of `data` (no copy)."""
        little = np.dtype(dtype).newbyteorder("<")
        expected = int(np.prod(shape_xyzc)) * little.itemsize
        nbytes = memoryview(data).nbytes
        if nbytes != expected:
            raise EncodingError(
                f"raw chunk is {nbytes} bytes, expected {expected} for "
                f"{tuple(shape_xyzc)} {little.name}"
            )
        return np.frombuffer(data, dtype=little).reshape(shape_xyzc, order="F")

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None:
        check_dtype("raw", dtype, RAW_DTYPES)
        check_channels("raw", num_channels)
