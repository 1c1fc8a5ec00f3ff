"""The two codec interfaces every chunk encoding implements (CPU here, CuPy twins later).

A `ByteCodec` turns bytes into bytes (gzip, zstd, blosc: precomputed `data_encoding` and zarr3
inner compressors). A `ChunkEncoding` turns one precomputed chunk, an array indexed
``[x, y, z, c]``, into the stored bytes and back (raw, compressed_segmentation, jpeg, png).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

Buffer = bytes | bytearray | memoryview


class EncodingError(ValueError):
    """An encoding that cannot store this data type / channel count / layer type."""


@runtime_checkable
class ByteCodec(Protocol):
    @property
    def name(self) -> str: ...

    def compress(self, data: Buffer) -> bytes: ...

    def decompress(self, data: Buffer) -> bytes: ...

    def zarr_json(self) -> dict[str, object]: ...


@runtime_checkable
class ChunkEncoding(Protocol):
    @property
    def name(self) -> str: ...

    def encode(self, chunk: np.ndarray) -> bytes: ...

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray: ...

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None: ...


def as_xyzc(chunk: np.ndarray) -> np.ndarray:
    """Accept [x, y, z] or [x, y, z, c] chunks; return the 4-D view."""
    if chunk.ndim == 3:
        return chunk[..., np.newaxis]
    if chunk.ndim != 4:
        raise ValueError(f"a chunk is indexed [x, y, z, c]; got {chunk.ndim} dimensions")
    return chunk
