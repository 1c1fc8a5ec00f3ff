"""What every source offers the planner and the engine: shape, dtype, axes, box reads.

Sources return boxes as arrays indexed [x, y, z, c]; an array source stored C-order (z, y, x)
hands out the transpose of what it read, which is exactly precomputed's x-fastest layout.
Sources are sent to Dask workers, so they hold paths, not open handles, when pickled.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from shardwright.errors import NAMED, ShardwrightError, SourceError

Box = tuple[int, int, int]


@dataclass(frozen=True)
class SourceHints:
    """Metadata a source may carry (None: unknown); explicit options override it.

    `placed_by` names the metadata that placed it ("OME-Zarr 0.4 dataset '0'", "its info"),
    for the plan to say where the voxel size and offset came from. A refusal says why the
    source's own placement cannot be carried exactly (a fractional offset, a rotation): the
    plan stops on it unless the option it names replaces it."""

    resolution: tuple[float, float, float] | None = None  # nm, x, y, z
    voxel_offset: tuple[int, int, int] | None = None  # voxels, x, y, z
    layer_type: str | None = None
    unit: str | None = None  # the space axes' unit where the source names one (OME output keeps it)
    # How far beyond `voxel_offset` voxel 0 lies, in voxels, where the source's placement says
    # so (a coarser dataset of a centred OME-Zarr pyramid): OME-Zarr output keeps it exactly.
    subvoxel_offset: tuple[float, float, float] | None = None
    placed_by: str | None = None
    resolution_refusal: str | None = None
    offset_refusal: str | None = None
    # The factor between the source's own pyramid levels (x, y, z), where it has levels: a
    # pyramid written from it takes that factor unless one is given.
    pyramid_factor: tuple[int, int, int] | None = None


def resolution_in_array_order(
    axes: str, values: Any, nm_per_unit: float
) -> tuple[float, float, float] | None:
    """The x, y, z voxel size in nm from `values` given per spatial axis in array order (as
    HDF5 attributes and ImageJ TIFFs record them), or None if they do not fit."""
    spatial = [a for a in axes if a in "xyz"]
    try:
        numbers = [float(v) * nm_per_unit for v in values]
    except (TypeError, ValueError):
        return None
    if len(numbers) != len(spatial) or sorted(spatial) != ["x", "y", "z"]:
        return None
    if not all(n > 0 and n == n and n != float("inf") for n in numbers):
        return None
    by_axis = dict(zip(spatial, numbers, strict=True))
    return by_axis["x"], by_axis["y"], by_axis["z"]


@runtime_checkable
class Source(Protocol):
    """A volume the converter can read box by box, on any worker."""

    url: str
    axes: str
    shape_xyz: tuple[int, int, int]
    num_channels: int
    dtype: np.dtype
    hints: SourceHints

    def read(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        """The box [start, stop) indexed [x, y, z, c]."""
        ...

    def read_native(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        """The box [start, stop) in the source's own axis order (without a time axis)."""
        ...


def location_of(source: Source) -> str:
    """Where a source lies, as the user named it (a user's own Source may lack `location`)."""
    location = getattr(source, "location", None)
    return location() if callable(location) else source.url


def json_object(text: str | bytes, where: str) -> dict[str, Any]:
    """A metadata document (`info`, `zarr.json`, a TensorStore spec) as a JSON object, or one
    SourceError naming `where` it came from."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SourceError(f"{where}: expected a JSON object, found {type(value).__name__}")
    return value


def file_identity(path: str) -> dict[str, Any]:
    """A local file as a job records it: where it really is, its size and last change, so
    that resuming from a replaced or edited file is refused."""
    stat = os.stat(path)
    return {"path": os.path.realpath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


SPACE_AXES = "xyz"
# Beside x and y: at most one z (without it a 2-D image, one slice thick), one channel axis
# (c) and one time axis (t, a single time point).
OTHER_AXES = "zct"
AXES_HELP = (
    "one letter per array dimension: x and y once each, z at most once (a 2-D image has "
    "none), at most one c (channels) and one t (a single time point), e.g. 'zyx', 'czyx', "
    "'zyxc', 'tczyx', 'yx', 'cyx'"
)


def valid_axes(axes: str) -> bool:
    """x and y once each, z, c and t at most once, nothing else."""
    return (
        all(axes.count(a) == 1 for a in "xy")
        and all(axes.count(a) <= 1 for a in OTHER_AXES)
        and set(axes) <= set(SPACE_AXES + OTHER_AXES)
    )


def check_axes(axes: str, ndim: int, url: str) -> str:
    """Axis letters must name each array dimension once (`valid_axes`)."""
    if not valid_axes(axes):
        raise SourceError(f"{url}: axes {axes!r} are not an axis order ({AXES_HELP})")
    if len(axes) != ndim:
        raise SourceError(f"{url}: axes {axes!r} name {len(axes)} dimensions, the array has {ndim}")
    return axes


# C-order axes as numpy, zarr and HDF5 users write them; 5-D as OME-Zarr and bioformats2raw do;
# 2-D an image (y,x), a volume one slice thick.
DEFAULT_AXES = {2: "yx", 3: "zyx", 4: "czyx", 5: "tczyx"}


def default_axes(ndim: int, url: str) -> str:
    """C-order z,y,x (c,z,y,x with channels, t,c,z,y,x with a time axis; y,x an image)."""
    if ndim in DEFAULT_AXES:
        return DEFAULT_AXES[ndim]
    raise SourceError(
        f"{url}: a {ndim}-D array is not a volume (2-D y,x, 3-D z,y,x, 4-D c,z,y,x or 5-D "
        "t,c,z,y,x expected); pass axes ({source_axes}) for other layouts",
        source_axes=NAMED,
    )


def axes_from_names(
    names: Sequence[Any] | None, mapping: dict[str, str] | None = None
) -> str | None:
    """Dimension names usable as axes (each exactly x, y, z, c or t, after `mapping`), else
    None."""
    if not isinstance(names, Sequence) or isinstance(names, str):
        return None
    letters = []
    for name in names:
        if not isinstance(name, str):
            return None
        letter = (mapping or {}).get(name, name.lower())
        if len(letter) != 1:
            return None
        letters.append(letter)
    axes = "".join(letters)
    return axes if valid_axes(axes) else None


class ArraySource:
    """A source over an array-like in its own axis order; subclasses implement `_read`.

    The axis bookkeeping lives here once: validation, shape_xyz, box -> slices in native order,
    and the transpose to [x, y, z, c]. Blocks come back in native byte order, as plain arrays.
    """

    url: str
    axes: str
    dtype: np.dtype
    hints: SourceHints
    root: str | None = None  # set by open_source where the user named a container of `url`
    fill_value: Any = 0  # what an absent chunk reads as: zarr and N5 arrays name their own

    def __init__(
        self,
        url: str,
        native_shape: Sequence[int],
        dtype: Any,
        axes: str | None,
        hints: SourceHints | None = None,
        detected_axes: str | None = None,
    ):
        ndim = len(native_shape)
        if ndim < 2:
            raise SourceError(
                f"{url}: a {ndim}-D array (shape {tuple(native_shape)}) is not an image; "
                "2-D (y,x), 3-D (z,y,x) or 4-D (c,z,y,x) expected"
            )
        self.url = url
        if axes:
            self.axes = check_axes(axes.lower(), ndim, url)
        elif detected_axes and len(detected_axes) == ndim:
            self.axes = check_axes(detected_axes, ndim, url)
        else:
            self.axes = default_axes(ndim, url)
        self.native_shape = tuple(int(n) for n in native_shape)
        self._stored_dtype = np.dtype(dtype)
        if self._stored_dtype.hasobject or self._stored_dtype.fields is not None:
            raise SourceError(f"{url}: dtype {self._stored_dtype} is not a voxel type")
        self.dtype = self._stored_dtype.newbyteorder("=")
        self.hints = hints or SourceHints()
        size = dict(zip(self.axes, self.native_shape, strict=True))
        if size.get("t", 1) != 1:
            raise SourceError(
                f"{url}: its t axis holds {size['t']} time points; a conversion writes one "
                "volume: select one time point (a TensorStore spec with an index transform, "
                'e.g. {"driver": "zarr", "kvstore": ..., "transform": ...}) and convert that'
            )
        self.shape_xyz = (size["x"], size["y"], size.get("z", 1))  # a 2-D image: one slice
        self.num_channels = size.get("c", 1)
        # The axes a read keeps (a single time point is dropped), in their native order.
        self._kept = "".join(a for a in self.axes if a != "t")
        self._to_xyzc = tuple(self._kept.index(a) for a in "xyzc" if a in self._kept)

    def _slices(self, start: Box, stop: Box) -> tuple[slice, ...]:
        bounds = {a: (int(start[i]), int(stop[i])) for i, a in enumerate("xyz")}
        for i, (lo, hi) in enumerate(bounds.values()):
            if not 0 <= lo <= hi <= self.shape_xyz[i]:
                raise SourceError(
                    f"{self.url}: box {tuple(start)}-{tuple(stop)} is outside the volume "
                    f"[0, {self.shape_xyz}) (x,y,z)"
                )
        return tuple(slice(*bounds[a]) if a in bounds else slice(None) for a in self.axes)

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        """The native-order block for these slices, as an in-memory array."""
        raise NotImplementedError

    def read_native(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        """The box in the source's own axis order, a single time point's axis dropped."""
        slices = self._slices(start_xyz, stop_xyz)
        try:
            block = np.asarray(self._read(slices))
        except ShardwrightError:
            raise
        except (OSError, ValueError) as exc:  # the data itself: unreadable, truncated, gone
            raise SourceError(
                f"{self.url}: cannot read the box {tuple(start_xyz)}-{tuple(stop_xyz)} (x,y,z): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from exc
        if "t" in self.axes:  # its one time point
            block = np.squeeze(block, axis=self.axes.index("t"))
        # Big-endian files (TIFF 'MM', HDF5 '>u2') are swapped once here, not by every consumer.
        return block if block.dtype == self.dtype else block.astype(self.dtype)

    def read(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        block = np.transpose(self.read_native(start_xyz, stop_xyz), self._to_xyzc)
        if "z" not in self._kept:  # a 2-D image: its one slice
            block = np.expand_dims(block, 2)
        return block if "c" in self._kept else block[..., np.newaxis]

    def reusing(self, boxes: Sequence[tuple[Box, Box]]) -> AbstractContextManager[object]:
        """Reads as they are (a source whose chunks are its own, e.g. precomputed, keeps
        them)."""
        return contextlib.nullcontext()

    def location(self) -> str | None:
        """Where the source lies as the user named it (the OME-Zarr group, not the array
        inside it that is read): what no destination may be inside of. None for an array in
        memory."""
        return self.root or self.url

    def identity(self) -> dict[str, Any]:
        """What tells this source apart from another of the same shape (lifecycle/
        fingerprint.py): file sizes and change times, metadata digests and generations."""
        return {"url": self.url}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, axes={self.axes!r})"
