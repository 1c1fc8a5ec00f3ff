"""The two codec interfaces every chunk encoding implements (CPU here, CuPy twins later).

A `ByteCodec` turns bytes into bytes (gzip, zstd, blosc: precomputed `data_encoding` and zarr3
inner compressors). A `ChunkEncoding` turns one precomputed chunk, an array indexed
``[x, y, z, c]``, into the stored bytes and back (raw, compressed_segmentation, jpeg, png).
A C-order ``(c, z, y, x)`` source block transposed is such an array, F-contiguous, at no cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import DTypeLike

from shardwright.errors import EncodingError

Buffer = bytes | bytearray | memoryview


@runtime_checkable
class ByteCodec(Protocol):
    """bytes -> bytes; `zarr_json` is the Zarr v3 codec entry that describes the output, and
    the codec's `from_zarr_json(configuration, itemsize)` classmethod reads one back (refusing,
    with an EncodingError, what it cannot reproduce exactly)."""

    @property
    def name(self) -> str: ...

    def compress(self, data: Buffer) -> bytes: ...

    def decompress(self, data: Buffer) -> bytes: ...

    def zarr_json(self) -> dict[str, object]: ...


@runtime_checkable
class ChunkEncoding(Protocol):
    """[x, y, z, c] array <-> precomputed chunk bytes; `name` is the info `encoding` string."""

    @property
    def name(self) -> str: ...

    def encode(self, chunk: np.ndarray) -> bytes: ...

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray: ...

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None: ...


def as_xyzc(chunk: np.ndarray) -> np.ndarray:
    """Accept [x, y, z] or [x, y, z, c] chunks; return the 4-D view."""
    if chunk.ndim == 3:
        return chunk[..., np.newaxis]
    if chunk.ndim != 4:
        raise EncodingError(f"a chunk is indexed [x, y, z, c]; got {chunk.ndim} dimensions")
    return chunk


def check_dtype(encoding: str, dtype: DTypeLike, allowed: tuple[str, ...]) -> None:
    """Refuse a data type the encoding (as TensorStore and Neuroglancer read it) cannot hold."""
    name = np.dtype(dtype).name
    if name not in allowed:
        raise EncodingError(
            f"{encoding} encoding cannot store {name} data (it takes {', '.join(allowed)})"
        )


def check_channels(encoding: str, num_channels: int, most: int | None = None) -> None:
    if num_channels < 1 or (most is not None and num_channels > most):
        limit = f"1 to {most}" if most is not None else "at least 1"
        raise EncodingError(f"{encoding} encoding stores {limit} channels, got {num_channels}")


def only_members(configuration: Mapping[str, Any], allowed: set[str]) -> None:
    """Refuse members of a zarr.json codec configuration outside `allowed`, naming them."""
    unknown = sorted(set(configuration) - allowed)
    if unknown:
        raise EncodingError(f"unsupported member(s): {', '.join(unknown)}")
