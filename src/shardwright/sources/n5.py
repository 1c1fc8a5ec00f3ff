"""N5 datasets and multiscale N5 groups (BigDataViewer, Saalfeld-lab tools, Paintera), read
through TensorStore's `n5` driver.

N5 lists `dimensions` fastest axis first: a volume is x, y, z (x, y, z, c), which is the
default axis order here; an `axes` attribute, where a writer recorded one, says otherwise.
The voxel size comes from `resolution` (with `units`) or `pixelResolution`, times the scale's
`downsamplingFactors` when only the group records it. A scale of a multiscale group lends its
pyramid's step (its `downsamplingFactors` against the next scale's, or the group's `scales`) as
the default factor of the levels built from it.
"""

from __future__ import annotations

import re
from typing import Any

from shardwright.common.downsample import Factor, factor_between
from shardwright.errors import NAMED, SourceError
from shardwright.sources.base import SourceHints, axes_from_names
from shardwright.sources.location import N5_MARKER, Location, look_at_node
from shardwright.sources.request import SourceRequest
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec
from shardwright.sources.units import nm_per

SCALE_NAMES = ("s0", "scale0", "setup0/timepoint0/s0")


def open_n5(request: SourceRequest, location: Location) -> TensorStoreSource:
    """The N5 dataset at the location, or scale `scale_key` (default the finest, s0) of the
    group there."""
    url, attributes = location.url, location.document(N5_MARKER) or {}
    if "dimensions" not in attributes:
        return _open_scale(request, url, attributes)
    if request.scale_key is not None:
        raise SourceError(
            f"{url}: a single N5 dataset has no scales; scale_key {request.scale_key!r} "
            "applies to multiscale N5 groups"
        )
    return _dataset(url, attributes, request.axes, request.storage_options, group=None)


def _open_scale(request: SourceRequest, url: str, group: dict[str, Any]) -> TensorStoreSource:
    scale_key = request.scale_key
    names = [scale_key.strip("/")] if scale_key is not None else list(SCALE_NAMES)
    for name in names:
        node = look_at_node(f"{url.rstrip('/')}/{name}", request.storage_options, (N5_MARKER,))
        attributes = node.document(N5_MARKER)
        if attributes is not None and "dimensions" in attributes:
            return _dataset(node.url, attributes, request.axes, request.storage_options, group,
                            (url, name))  # fmt: skip
    wanted = f"scale {scale_key!r}" if scale_key is not None else "dataset s0"
    raise SourceError(
        f"{url}: an N5 group without {wanted}; name one of its datasets ({{source_scale}})",
        source_scale=NAMED,
    )


def _dataset(
    url: str,
    attributes: dict[str, Any],
    axes: str | None,
    storage_options: dict[str, Any] | None,
    group: dict[str, Any] | None,
    scale: tuple[str, str] | None = None,
) -> TensorStoreSource:
    """The dataset at `url`; `scale`: (the group's url, the scale's name) where it is one."""
    dimensions = attributes.get("dimensions") or []
    named = axes_from_names(attributes.get("axes") or (group or {}).get("axes"))
    default = {2: "xy", 3: "xyz", 4: "xyzc"}.get(len(dimensions))  # N5 lists x first
    resolution = _resolution(attributes, group, named or default)
    step = None
    if scale is not None and group is not None:
        step = _own_step(*scale, attributes, group, named or default, storage_options)
    hints = SourceHints(resolution, placed_by="its N5 attributes" if resolution else None,
                        pyramid_factor=step)  # fmt: skip
    spec = {"driver": "n5", "kvstore": kvstore_spec(url, storage_options)}
    return TensorStoreSource(
        url, spec, axes, hints, storage_options=storage_options, detected_axes=named or default
    )


def _own_step(
    url: str,
    name: str,
    attributes: dict[str, Any],
    group: dict[str, Any],
    axes: str | None,
    storage_options: dict[str, Any] | None,
) -> Factor | None:
    """The step of the group's own pyramid at scale `name` (`s2`: the factors of s2 against
    s3's, or against s1's for the coarsest), x, y, z; None where the group records none."""
    match = re.fullmatch(r"(.*?)(\d+)", name)
    if match is None or axes is None:
        return None
    prefix, index = match.group(1), int(match.group(2))
    listed = group.get("scales")

    def factors(k: int) -> Any:
        if isinstance(listed, list):
            return listed[k] if 0 <= k < len(listed) else None
        if k == index:
            return attributes.get("downsamplingFactors")
        if k < 0:
            return None
        node = look_at_node(f"{url.rstrip('/')}/{prefix}{k}", storage_options, (N5_MARKER,))
        return (node.document(N5_MARKER) or {}).get("downsamplingFactors")

    for finer, coarser in ((index, index + 1), (index - 1, index)):
        low, high = factors(finer), factors(coarser)
        if not isinstance(low, list) or not isinstance(high, list):
            continue
        if len(low) != len(axes) or len(high) != len(axes) or not set("xyz") <= set(axes):
            return None
        pick = [axes.index(a) for a in "xyz"]
        step = factor_between([low[i] for i in pick], [high[i] for i in pick])
        if step is not None:
            return step
    return None


def _resolution(
    attributes: dict[str, Any], group: dict[str, Any] | None, axes: str | None
) -> tuple[float, float, float] | None:
    """x, y, z voxel size in nm, where the dataset (or its group, times the dataset's
    downsampling factors) records it with a known unit."""
    factors = attributes.get("downsamplingFactors")
    for where, scale_by in ((attributes, None), (group or {}, factors)):
        values, units = _recorded(where)
        if values is None or axes is None or len(values) != len(axes):
            continue
        if scale_by is not None and len(scale_by) == len(values):
            values = [float(v) * float(f) for v, f in zip(values, scale_by, strict=True)]
        by_axis: dict[str, float] = {}
        for axis, value, unit in zip(axes, values, units, strict=True):
            factor = nm_per(unit)
            if axis in "xyz" and factor is not None and float(value) > 0:
                by_axis[axis] = float(value) * factor
        if all(a in by_axis for a in "xyz"):
            return by_axis["x"], by_axis["y"], by_axis["z"]
    return None


def _recorded(attributes: dict[str, Any]) -> tuple[list[Any] | None, list[str]]:
    """(sizes, units) as `pixelResolution` {unit, dimensions} or `resolution` + `units`."""
    pixel = attributes.get("pixelResolution")
    if isinstance(pixel, dict) and isinstance(pixel.get("dimensions"), list):
        sizes = pixel["dimensions"]
        return sizes, [str(pixel.get("unit", ""))] * len(sizes)
    sizes = attributes.get("resolution")
    if not isinstance(sizes, list):
        return None, []
    units = attributes.get("units")
    if not isinstance(units, list) or len(units) != len(sizes):
        units = ["nm"] * len(sizes)  # neuroglancer's convention when no unit is recorded
    return sizes, [str(u) for u in units]
