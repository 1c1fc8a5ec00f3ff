"""What every source offers the planner and the engine: shape, dtype, axes, box reads.

Sources return boxes as arrays indexed [x, y, z, c]; an array source stored C-order (z, y, x)
hands out the transpose of what it read, which is exactly precomputed's x-fastest layout.
Sources are sent to Dask workers, so they hold paths, not open handles, when pickled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

Box = tuple[int, int, int]


class SourceError(ValueError):
    """A source that cannot be read as asked; the message names the source and the problem."""


@dataclass(frozen=True)
class SourceHints:
    """Metadata a source may carry (None: unknown)."""

    resolution: tuple[float, float, float] | None = None
    voxel_offset: tuple[int, int, int] | None = None
    layer_type: str | None = None


@runtime_checkable
class Source(Protocol):
    url: str
    axes: str
    shape_xyz: tuple[int, int, int]
    num_channels: int
    dtype: np.dtype
    hints: SourceHints

    def read(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray: ...

    def read_native(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray: ...


def check_axes(axes: str, ndim: int, url: str) -> str:
    """Axis letters must be x, y, z and at most one c, one per array dimension."""
    letters = sorted(axes)
    if letters not in (sorted("xyz"), sorted("xyzc")):
        raise SourceError(f"{url}: axes {axes!r} must be a permutation of 'xyz' or 'xyzc'")
    if len(axes) != ndim:
        raise SourceError(f"{url}: axes {axes!r} name {len(axes)} dimensions, the array has {ndim}")
    return axes


def default_axes(ndim: int, url: str) -> str:
    if ndim == 3:
        return "zyx"
    if ndim == 4:
        return "czyx"
    raise SourceError(
        f"{url}: a {ndim}-D array is not a volume (3-D z,y,x or 4-D c,z,y,x); "
        "pass --source-axes for other layouts"
    )


class ArraySource:
    """A source over an array-like in its own axis order; subclasses implement `_read`."""

    url: str
    axes: str
    dtype: np.dtype
    hints: SourceHints

    def __init__(
        self,
        url: str,
        native_shape: tuple[int, ...],
        dtype: Any,
        axes: str | None,
        hints: SourceHints | None = None,
    ):
        if len(native_shape) < 3:
            raise SourceError(f"{url}: a {len(native_shape)}-D array is not a volume")
        self.url = url
        self.axes = (
            check_axes(axes, len(native_shape), url)
            if axes
            else default_axes(len(native_shape), url)
        )
        self.native_shape = tuple(int(n) for n in native_shape)
        self.dtype = np.dtype(dtype)
        self.hints = hints or SourceHints()
        size = dict(zip(self.axes, self.native_shape, strict=True))
        self.shape_xyz = (size["x"], size["y"], size["z"])
        self.num_channels = size.get("c", 1)
        self._to_xyzc = tuple(self.axes.index(a) for a in "xyzc" if a in self.axes)

    def _slices(self, start: Box, stop: Box) -> tuple[slice, ...]:
        bounds = {"x": (start[0], stop[0]), "y": (start[1], stop[1]), "z": (start[2], stop[2])}
        for axis, (lo, hi) in bounds.items():
            size = self.shape_xyz["xyz".index(axis)]
            if not 0 <= lo <= hi <= size:
                raise SourceError(
                    f"{self.url}: box {start}-{stop} outside the volume {self.shape_xyz} (x,y,z)"
                )
        return tuple(slice(*bounds[a]) if a in bounds else slice(None) for a in self.axes)

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        raise NotImplementedError

    def read_native(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        return np.asarray(self._read(self._slices(start_xyz, stop_xyz)))

    def read(self, start_xyz: Box, stop_xyz: Box) -> np.ndarray:
        block = np.transpose(self.read_native(start_xyz, stop_xyz), self._to_xyzc)
        return block if "c" in self.axes else block[..., np.newaxis]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, axes={self.axes!r})"
