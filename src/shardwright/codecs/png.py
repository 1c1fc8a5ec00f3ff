"""Precomputed `png`: the jpeg image layout (x across, y*z down, channels interleaved), lossless.

uint8 or uint16 with 1 to 4 channels (gray, gray+alpha, RGB, RGBA), exactly what TensorStore's
neuroglancer_precomputed driver accepts; 16-bit samples are big-endian inside the PNG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
from numpy.typing import DTypeLike

from shardwright.codecs.base import Buffer, as_xyzc, check_channels, check_dtype
from shardwright.codecs.jpeg import from_image, to_image
from shardwright.errors import EncodingError

PNG_DTYPES = ("uint8", "uint16")
PNG_MAX_CHANNELS = 4


def _imagecodecs() -> ModuleType:
    """imagecodecs, on first use: a dependency of every install, left out only of the GPU
    verification wheelhouse (benchmarks/gpu), where png is no GPU path."""
    try:
        import imagecodecs
    except ImportError as exc:
        raise EncodingError(
            f"the png encoding needs imagecodecs: pip install imagecodecs ({exc})"
        ) from None
    return imagecodecs


@dataclass(frozen=True)
class PngEncoding:
    """`level` is the zlib level inside the PNG (readers ignore it)."""

    level: int = 3
    name: str = field(default="png", init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.level <= 9:
            raise EncodingError(f"png level must be in 0..9, got {self.level}")

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        check_dtype("png", data.dtype, PNG_DTYPES)
        check_channels("png", data.shape[3], PNG_MAX_CHANNELS)
        image = to_image(data.astype(data.dtype.newbyteorder("="), copy=False))
        if image.shape[2] == 1:
            image = image[..., 0]
        # imagecodecs sizes its output from the image and runs short for narrow images (one
        # voxel wide chunks): give it the worst case, every row stored plus zlib's overhead.
        rows = image.shape[0] * (image[0].nbytes + 1)
        out = rows + rows // 64 + 1024
        return bytes(_imagecodecs().png_encode(image, level=self.level, out=out))

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray:
        image = np.asarray(_imagecodecs().png_decode(data))
        if image.dtype != np.dtype(dtype):
            raise EncodingError(f"png chunk holds {image.dtype} pixels, expected {np.dtype(dtype)}")
        return from_image(image, shape_xyzc, "png")

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None:
        check_dtype("png", dtype, PNG_DTYPES)
        check_channels("png", num_channels, PNG_MAX_CHANNELS)
