"""Precomputed `png`: the jpeg image layout (x across, y*z down), lossless.

uint8 with 1-4 channels or uint16 with 1-2 channels, as TensorStore and Neuroglancer accept.
"""

from __future__ import annotations

from dataclasses import dataclass

import imagecodecs
import numpy as np

from shardwright.codecs.base import Buffer, EncodingError, as_xyzc
from shardwright.codecs.jpeg import from_image, to_image
from shardwright.codecs.raw import check_dtype

MAX_CHANNELS = {"uint8": 4, "uint16": 2}


@dataclass(frozen=True)
class PngEncoding:
    level: int = 3
    name: str = "png"

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        image = to_image(data.astype(data.dtype.newbyteorder("="), copy=False))
        if image.shape[2] == 1:
            image = image[..., 0]
        return bytes(imagecodecs.png_encode(image, level=self.level))

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray:
        image = np.asarray(imagecodecs.png_decode(bytes(data)))
        if image.dtype != np.dtype(dtype):
            raise ValueError(f"png chunk holds {image.dtype} pixels, expected {np.dtype(dtype)}")
        return from_image(image, shape_xyzc)

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None:
        check_dtype("png", dtype, tuple(MAX_CHANNELS))
        limit = MAX_CHANNELS[np.dtype(dtype).name]
        if not 1 <= num_channels <= limit:
            raise EncodingError(
                f"png encoding stores 1 to {limit} channels of "
                f"{np.dtype(dtype).name}, got {num_channels}"
            )
