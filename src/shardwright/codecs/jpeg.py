"""Precomputed `jpeg`: the chunk as one image, x across, y*z down (rows are x runs).

Flattening the image's rows gives the [x, y, z] Fortran-order voxels; with 3 channels each
pixel's R, G, B hold channels 0, 1, 2 (interleaved), as TensorStore and Neuroglancer lay it out.
Lossy: images only, uint8 with 1 or 3 channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simplejpeg
from numpy.typing import DTypeLike

from shardwright.codecs.base import Buffer, as_xyzc, check_dtype
from shardwright.errors import EncodingError


def to_image(chunk_xyzc: np.ndarray) -> np.ndarray:
    """[x, y, z, c] -> (y*z rows, x columns, c) image, C-contiguous (one copy at most)."""
    x, y, z, c = chunk_xyzc.shape
    return np.ascontiguousarray(chunk_xyzc.transpose(2, 1, 0, 3)).reshape(z * y, x, c)


def from_image(
    image: np.ndarray, shape_xyzc: tuple[int, int, int, int], encoding: str
) -> np.ndarray:
    """Any (rows, columns[, c]) image whose row-major pixels are the Fortran [x, y, z] voxels."""
    x, y, z, c = shape_xyzc
    channels = 1 if image.ndim == 2 else image.shape[2]
    if image.size != x * y * z * c or channels != c:
        raise EncodingError(
            f"{encoding} chunk holds a {image.shape} image, which is not a "
            f"{tuple(shape_xyzc)} [x, y, z, c] chunk"
        )
    return image.reshape(z, y, x, c).transpose(2, 1, 0, 3)


@dataclass(frozen=True)
class JpegEncoding:
    quality: int = 85
    name: str = field(default="jpeg", init=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.quality <= 100:
            raise EncodingError(f"jpeg quality must be in 1..100, got {self.quality}")

    def encode(self, chunk: np.ndarray) -> bytes:
        data = as_xyzc(chunk)
        check_dtype("jpeg", data.dtype, ("uint8",))
        image = to_image(data)
        if image.shape[2] == 1:
            return bytes(
                simplejpeg.encode_jpeg(
                    image, quality=self.quality, colorspace="GRAY", colorsubsampling="Gray"
                )
            )
        if image.shape[2] != 3:
            raise EncodingError(f"jpeg encoding needs 1 or 3 channels, got {image.shape[2]}")
        # 4:4:4 keeps every channel at full resolution: the channels are data, not a picture.
        return bytes(
            simplejpeg.encode_jpeg(
                image, quality=self.quality, colorspace="RGB", colorsubsampling="444"
            )
        )

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray:
        colorspace = "GRAY" if shape_xyzc[3] == 1 else "RGB"
        image = simplejpeg.decode_jpeg(data, colorspace=colorspace)
        return from_image(image, shape_xyzc, "jpeg")

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None:
        check_dtype("jpeg", dtype, ("uint8",))
        if num_channels not in (1, 3):
            raise EncodingError(f"jpeg encoding needs 1 or 3 channels, got {num_channels}")
        if layer_type == "segmentation":
            raise EncodingError(
                "jpeg encoding is lossy and would corrupt segmentation labels; "
                "use raw, png or compressed_segmentation"
            )
