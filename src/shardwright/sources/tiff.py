"""TIFF volumes: one multi-page file (pages are z) or a directory / glob of 2-D slices.

A box read opens only the pages or slice files of its z range.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

import numpy as np
import tifffile

from shardwright.sources.base import ArraySource, SourceError

TIFF_SUFFIXES = (".tif", ".tiff")


def natural_key(path: str) -> list[Any]:
    """slice_2 sorts before slice_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


class TiffFileSource(ArraySource):
    """A multi-page TIFF; pages are z slices of shape (y, x) or (y, x, c)."""

    def __init__(self, path: str, axes: str | None = None):
        self.path = path
        try:
            with tifffile.TiffFile(path) as tif:
                series = tif.series[0]
                shape, dtype = tuple(series.shape), series.dtype
        except (tifffile.TiffFileError, OSError) as exc:
            raise SourceError(f"{path}: not a readable TIFF file ({exc})") from exc
        if len(shape) == 2:
            raise SourceError(f"{path}: a single 2-D image, not a volume")
        self.pages = shape[0]
        super().__init__(path, shape, dtype, axes or ("zyx" if len(shape) == 3 else "zyxc"))
        if self.axes[0] != "z":
            raise SourceError(f"{path}: TIFF pages are z; axes must start with 'z'")

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        pages = range(*slices[0].indices(self.pages))
        if not len(pages):
            return np.empty((0, *self.native_shape[1:]), self.dtype)[(slice(None), *slices[1:])]
        data = tifffile.imread(self.path, key=pages)
        data = data.reshape(len(pages), *self.native_shape[1:])
        return data[(slice(None), *slices[1:])]


def _check_slices(files: list[str]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype shared by every slice, from their headers (no pixel data is read)."""
    expected: tuple[tuple[int, ...], np.dtype] | None = None
    for path in files:
        try:
            with tifffile.TiffFile(path) as tif:
                found = (tuple(tif.series[0].shape), np.dtype(tif.series[0].dtype))
        except (tifffile.TiffFileError, OSError) as exc:
            raise SourceError(f"{path}: not a readable TIFF slice ({exc})") from exc
        if expected is None:
            expected = found
        elif found != expected:
            raise SourceError(
                f"{path}: slice is {found[0]} {found[1]}, expected "
                f"{expected[0]} {expected[1]} like {files[0]}"
            )
    assert expected is not None
    return expected


class TiffSlicesSource(ArraySource):
    """A directory or glob of 2-D TIFF slices, one per z, in natural name order."""

    def __init__(self, pattern: str, axes: str | None = None):
        if os.path.isdir(pattern):
            files = [
                os.path.join(pattern, n)
                for n in os.listdir(pattern)
                if n.lower().endswith(TIFF_SUFFIXES)
            ]
        else:
            files = [f for f in glob.glob(pattern) if f.lower().endswith(TIFF_SUFFIXES)]
        if not files:
            raise SourceError(f"{pattern}: no TIFF slices found")
        self.files = sorted(files, key=natural_key)
        plane_shape, dtype = _check_slices(self.files)
        if len(plane_shape) not in (2, 3):
            raise SourceError(f"{self.files[0]}: slices must be 2-D (y, x) or (y, x, c)")
        shape = (len(self.files), *plane_shape)
        super().__init__(pattern, shape, dtype, axes or ("zyx" if len(shape) == 3 else "zyxc"))
        if self.axes[0] != "z":
            raise SourceError(f"{pattern}: TIFF slices are z; axes must start with 'z'")

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        planes = []
        for path in self.files[slices[0]]:
            plane = tifffile.imread(path)
            if plane.shape != self.native_shape[1:] or plane.dtype != self.dtype:
                raise SourceError(
                    f"{path}: slice is {plane.shape} {plane.dtype}, expected "
                    f"{self.native_shape[1:]} {self.dtype} like the first slice"
                )
            planes.append(plane[slices[1:]])
        if not planes:
            return np.empty((0, *self.native_shape[1:]), self.dtype)[(slice(None), *slices[1:])]
        return np.stack(planes)
