"""TIFF volumes: one multi-page file (pages are z) or a directory / glob of 2-D slices.

A box read touches only what the box needs: pixels stored contiguously and uncompressed are
memory-mapped; compressed ones go through tifffile's zarr view, which decodes only the pages and
strips/tiles the box overlaps. A slice stack opens only the slice files of the box's z range.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import itertools
import json
import math
import os
import re
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import tifffile

from shardwright.errors import NAMED, SourceError
from shardwright.sources import missing
from shardwright.sources.base import ArraySource, SourceHints, axes_from_names, file_identity
from shardwright.sources.kinds import is_tiff_name
from shardwright.sources.units import nm_per

# tifffile's axis codes: S are samples (RGB, or contiguous extra channels), C channels, and
# Q / I / T the unnamed page axis of a plain stack, which is z here.
TIFF_AXES = {"X": "x", "Y": "y", "Z": "z", "C": "c", "S": "c", "Q": "z", "I": "z", "T": "z"}


def natural_key(path: str) -> list[Any]:
    """slice_2 sorts before slice_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def _open_tiff(path: str) -> tifffile.TiffFile:
    """Every TIFF this module reads is opened here."""
    return tifffile.TiffFile(path)


def _tiff_axes(series_axes: str) -> str | None:
    """Our axis letters for tifffile's, when they map one to one (else None: use defaults)."""
    if "Z" in series_axes:  # a named z wins over an unnamed page axis
        series_axes = series_axes.replace("Q", "?").replace("I", "?").replace("T", "?")
    return axes_from_names(list(series_axes), TIFF_AXES)


def _region_reader(tif: tifffile.TiffFile, path: str) -> Any:
    """An array-like over the first series that reads only the regions it is sliced with."""
    series = tif.series[0]
    if series.dataoffset is not None:
        dtype = np.dtype(tif.byteorder + series.dtype.char)
        return np.memmap(path, dtype=dtype, mode="r", offset=series.dataoffset, shape=series.shape)
    try:
        import zarr
    except ImportError as exc:  # pragma: no cover - zarr is installed wherever tests run
        raise SourceError(f"{path}: reading a compressed TIFF by region needs zarr>=3") from exc
    array = zarr.open_array(series.aszarr(), mode="r")
    if tuple(array.shape) != tuple(series.shape):
        raise SourceError(f"{path}: TIFF layout {series.axes} {series.shape} is not supported")
    return array


def _header(
    path: str,
) -> tuple[tuple[int, ...], np.dtype, str, bool, tuple[float, float, float] | None]:
    """Shape, dtype, tifffile axes, memory-mappability and voxel size of a file's first
    series."""
    try:
        with _open_tiff(path) as tif:
            series = tif.series[0]
            return (
                tuple(series.shape),
                np.dtype(series.dtype),
                series.axes,
                (series.dataoffset is not None),
                _imagej_voxel_size(tif),
            )
    except (tifffile.TiffFileError, OSError, ValueError, IndexError) as exc:
        raise SourceError(f"{path}: not a readable TIFF ({exc})") from exc


def _imagej_voxel_size(tif: tifffile.TiffFile) -> tuple[float, float, float] | None:
    """The x, y, z voxel size in nm an ImageJ TIFF records (pixels per unit in the X/Y
    resolution tags, the slice spacing and unit in its description), or None."""
    metadata = tif.imagej_metadata if tif.is_imagej else None
    if not metadata or "spacing" not in metadata:
        return None
    nm = nm_per(str(metadata.get("unit", "")).lower())
    page = tif.pages[0]  # a TiffPage: only later pages may be read as (tagless) TiffFrames
    if nm is None or not isinstance(page, tifffile.TiffPage):
        return None
    tags = page.tags
    if "XResolution" not in tags or "YResolution" not in tags:
        return None
    try:
        (xn, xd), (yn, yd) = tags["XResolution"].value, tags["YResolution"].value
        sizes = (xd / xn * nm, yd / yn * nm, float(metadata["spacing"]) * nm)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return sizes if all(0 < v < float("inf") for v in sizes) else None


class TiffFileSource(ArraySource):
    """A multi-page TIFF; pages are z slices of shape (y, x) or (y, x, c). A single page is
    a 2-D image, a volume one slice thick."""

    def __init__(self, path: str, axes: str | None = None, url: str | None = None):
        self.path = path
        shape, dtype, series_axes, mappable, voxel_size = _header(path)
        detected = _tiff_axes(series_axes)
        if detected is None and axes is None and len(shape) != 3:
            raise SourceError(
                f"{url or path}: cannot tell the axes of TIFF layout {series_axes} {shape}; "
                "pass axes ({source_axes})",
                source_axes=NAMED,
            )
        self._lock = threading.Lock()
        self._reader: Any = None
        self._closer: weakref.finalize | None = None
        super().__init__(
            url or path,
            shape,
            dtype,
            axes,
            hints=SourceHints(voxel_size, placed_by="its ImageJ metadata" if voxel_size else None),
            detected_axes=detected,
        )
        if not mappable:
            self._open()  # fail now, not on a worker, if the compression cannot be decoded

    def _open(self) -> Any:
        with self._lock:
            if self._reader is None:
                tif = _open_tiff(self.path)
                self._reader = _region_reader(tif, self.path)
                if isinstance(self._reader, np.memmap):
                    tif.close()
                else:  # the zarr view decodes through the open file: close it with the source
                    self._closer = weakref.finalize(self, tif.close)
        return self._reader

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        return np.array(self._open()[slices], order="C")

    def identity(self) -> dict[str, Any]:
        return file_identity(self.path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None, "_closer": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _slice_files(pattern: str) -> list[str]:
    if os.path.isdir(pattern):
        files = [os.path.join(pattern, n) for n in os.listdir(pattern) if is_tiff_name(n)]
    else:
        files = [f for f in glob.glob(pattern) if is_tiff_name(f) and os.path.isfile(f)]
    return sorted(files, key=natural_key)


class TiffSlicesSource(ArraySource):
    """A directory or glob of 2-D TIFF slices, one per z, in natural name order."""

    def __init__(
        self,
        pattern: str,
        axes: str | None = None,
        url: str | None = None,
        fill_missing: bool = False,
    ):
        url = url or pattern
        found = _slice_files(pattern)
        if not found:
            raise SourceError(f"{url}: no TIFF slices (.tif, .tiff) found")
        # z -> its slice file, None where the numbering skips one (filled only when asked)
        self.files: list[str | None] = _with_gaps(found, url, fill_missing)
        # Every header is checked now, so a stray slice fails the plan, not a worker hours in.
        with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
            headers = list(pool.map(_header, found))
        plane_shape, dtype, plane_axes, _, _ = headers[0]
        for path, (shape, other_dtype, _, _, _) in zip(found, headers, strict=True):
            if shape != plane_shape or other_dtype != dtype:
                raise SourceError(
                    f"{url}: slice {path} is {shape} {other_dtype}, expected "
                    f"{plane_shape} {dtype} like {found[0]}"
                )
        if len(plane_shape) not in (2, 3) or not set(plane_axes) <= set("YXSC"):
            raise SourceError(
                f"{url}: slices must be 2-D images (y, x) or (y, x, c); "
                f"{found[0]} is {plane_axes} {plane_shape}"
            )
        self.plane_shape = plane_shape
        shape = (len(self.files), *plane_shape)
        detected = _tiff_axes("Z" + plane_axes) or ("zyx" if len(plane_shape) == 2 else "zyxc")
        super().__init__(url, shape, dtype, axes, detected_axes=detected)
        # Compressed slices need the zarr view; check that it opens before any work is planned.
        if not headers[0][3]:
            with _open_tiff(found[0]) as tif:
                _region_reader(tif, found[0])

    def identity(self) -> dict[str, Any]:
        """Every slice's path, size and change time (and every gap), as one digest."""
        digest = hashlib.sha256()
        for path in self.files:
            entry = None if path is None else file_identity(path)
            digest.update(json.dumps(entry, sort_keys=True).encode())
        first = next(p for p in self.files if p is not None)
        return {"slices": len(self.files), "first": os.path.realpath(first),
                "sha256": digest.hexdigest()}  # fmt: skip

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        files = self.files[slices[0]]
        plane = tuple(range(n)[s] for n, s in zip(self.plane_shape, slices[1:], strict=True))
        out = np.zeros((len(files), *(len(r) for r in plane)), self._stored_dtype)
        if files:  # a slice is counted by the box that holds its first pixel
            first_z = range(len(self.files))[slices[0]][0]
            gaps = [f"slice z={first_z + i}" for i, path in enumerate(files) if path is None]
            whole = all(not s.start for s in slices[1:])
            missing.account(self.url, gaps, owned=len(files) if whole else 0,
                            owned_absent=gaps if whole else [], fill_missing=True)  # fmt: skip
        for i, path in enumerate(files):
            if path is None:
                continue
            with _open_tiff(path) as tif:
                series = tif.series[0]
                if tuple(series.shape) != self.plane_shape or series.dtype != self._stored_dtype:
                    raise SourceError(
                        f"{self.url}: slice {path} is now {series.shape} {series.dtype}, "
                        f"expected {self.plane_shape} {self._stored_dtype}"
                    )
                out[i] = _region_reader(tif, path)[slices[1:]]
        return out


def _with_gaps(files: list[str], url: str, fill_missing: bool) -> list[str | None]:
    """The slices by z: a numbered stack (`s_0001.tif`, `s_0002.tif`, ...) whose numbering
    skips some numbers has a gap there, refused unless `fill_missing` (then None). Numbers
    that step by a constant (every other slice exported) have no gap; names that are not one
    numbered pattern are taken in their natural order."""
    numbers = _slice_numbers(files)
    if numbers is None or len(files) < 2:
        return list(files)
    step = functools.reduce(math.gcd, (b - a for a, b in itertools.pairwise(numbers)))
    span = (numbers[-1] - numbers[0]) // step + 1
    if span == len(files):
        return list(files)
    by_z: list[str | None] = [None] * span
    for number, path in zip(numbers, files, strict=True):
        by_z[(number - numbers[0]) // step] = path
    if not fill_missing:
        gaps = [numbers[0] + z * step for z, path in enumerate(by_z) if path is None]
        shown = ", ".join(str(n) for n in gaps[:5]) + (" ..." if len(gaps) > 5 else "")
        raise missing.MissingChunksError(
            f"{url}: the slice numbering skips {len(gaps)} number(s) ({shown}) between "
            f"{os.path.basename(files[0])} and {os.path.basename(files[-1])}; pass "
            "{fill_missing} to write 0 for each missing slice",
            fill_missing=True,
        )
    return by_z


def _slice_numbers(files: list[str]) -> list[int] | None:
    """Each slice's number when every name is one pattern with one number that differs
    (`stack_z0007_v2.tif`), ascending and distinct; None otherwise."""
    parts = [re.split(r"(\d+)", os.path.basename(f)) for f in files]
    if len({len(p) for p in parts}) != 1 or len(parts[0]) < 2:
        return None
    varying = [i for i in range(1, len(parts[0]), 2) if len({p[i] for p in parts}) > 1]
    fixed = [i for i in range(0, len(parts[0]), 2)]
    if len(varying) != 1 or any(len({p[i] for p in parts}) > 1 for i in fixed):
        return None
    numbers = [int(p[varying[0]]) for p in parts]
    if any(b <= a for a, b in itertools.pairwise(numbers)):
        return None
    return numbers
