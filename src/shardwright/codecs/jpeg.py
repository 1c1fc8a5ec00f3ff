"""Precomputed `jpeg`: the chunk as one image, x across, y*z down (rows are x runs).

Flattening the image's rows gives the [x, y, z] Fortran-order voxels; with 3 channels each
pixel's RGB holds channels 0, 1, 2. Lossy: images only, uint8 with 1 or 3 channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simplejpeg

from shardwright.codecs.base import Buffer, EncodingError, as_xyzc
from shardwright.codecs.raw import check_dtype


def to_image(chunk_xyzc: np.ndarray) -> np.ndarray:
    """[x, y, z, c] -> (y*z rows, x columns, c) image, C-contiguous."""
    x, y, z, c = chunk_xyzc.shape
    return np.ascontiguousarray(chunk_xyzc.transpose(2, 1, 0, 3)).reshape(z * y, x, c)


def from_image(image: np.ndarray, shape_xyzc: tuple[int, int, int, int]) -> np.ndarray:
    x, y, z, c = shape_xyzc
    return image.reshape(z, y, x, c).transpose(2, 1, 0, 3)


@dataclass(frozen=True)
class JpegEncoding:
    quality: int = 85
    name: str = "jpeg"

    def __post_init__(self) -> None:
        if not 1 <= self.quality <= 100:
            raise ValueError(f"jpeg quality must be in 1..100, got {self.quality}")

    def encode(self, chunk: np.ndarray) -> bytes:
        image = to_image(as_xyzc(chunk))
        if image.shape[2] == 1:
            return bytes(
                simplejpeg.encode_jpeg(
                    image, quality=self.quality, colorspace="GRAY", colorsubsampling="Gray"
                )
            )
        return bytes(
            simplejpeg.encode_jpeg(
                image, quality=self.quality, colorspace="RGB", colorsubsampling="444"
            )
        )

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: np.dtype
    ) -> np.ndarray:
        colorspace = "GRAY" if shape_xyzc[3] == 1 else "RGB"
        image = simplejpeg.decode_jpeg(bytes(data), colorspace=colorspace)
        return from_image(image, shape_xyzc)

    def check(self, dtype: np.dtype, num_channels: int, layer_type: str) -> None:
        check_dtype("jpeg", dtype, ("uint8",))
        if num_channels not in (1, 3):
            raise EncodingError(f"jpeg encoding needs 1 or 3 channels, got {num_channels}")
        if layer_type == "segmentation":
            raise EncodingError(
                "jpeg encoding is lossy and would corrupt segmentation labels; "
                "use raw, png or compressed_segmentation"
            )
