"""Precomputed `raw`: little-endian voxels in [x, y, z, c] Fortran order, no header."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwright.codecs.base import Buffer, EncodingError, as_xyzc

# What Neuroglancer and TensorStore read as precomputed data types.
RAW_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")


def check_dtype(encoding: str, dtype: np.dtype, allowed: tuple[str, ...]) -> None:
    if np.dtype(dtype).name not in allowed:
        raise EncodingError(
            f"{encoding} encoding cannot store {np.dtype(dtype).name} data "
            f"(it takes {', '.join(allowed)})"
        )


@dataclass(frozen=True)
class RawEncoding:
    name: str = "raw"

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        # One copy: tobytes(order="F") gathers a strided view straight into the output.
        return data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes(order="F")

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray:
        little = np.dtype(dtype).newbyteorder("<")
        expected = int(np.prod(shape_xyzc)) * little.itemsize
        if len(data) != expected:
            raise ValueError(
                f"raw chunk is {len(data)} bytes, expected {expected} for "
                f"{shape_xyzc} {np.dtype(dtype).name}"
            )
        return np.frombuffer(data, dtype=little).reshape(shape_xyzc, order="F")

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None:
        check_dtype("raw", dtype, RAW_DTYPES)
