"""Zarr v2 and v3 arrays, and OME-Zarr multiscale groups, read through TensorStore.

Only metadata is read here (`zarr.json`, `.zarray`, `.zattrs`); TensorStore does the chunk
I/O, so a box read fetches only the chunks (or inner shard chunks) it touches.
"""

from __future__ import annotations

from typing import Any

from shardwright.errors import SourceError
from shardwright.sources.base import SourceHints, axes_from_names
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec, read_json

UNIT_TO_NM = {
    "nanometer": 1.0,
    "nm": 1.0,
    "angstrom": 0.1,
    "micrometer": 1000.0,
    "micron": 1000.0,
    "millimeter": 1e6,
}


def open_zarr(
    url: str,
    axes: str | None = None,
    scale_key: str | None = None,
    hints: SourceHints | None = None,
    storage_options: dict[str, Any] | None = None,
    detected_axes: str | None = None,
) -> TensorStoreSource:
    """A zarr array, or dataset `scale_key` (default: the first) of an OME-Zarr group."""
    so = storage_options
    meta = read_json(url, "zarr.json", so)
    if meta is not None:
        if meta.get("node_type") == "group":
            return _open_multiscale(url, meta.get("attributes") or {}, axes, scale_key, so)
        names, driver = meta.get("dimension_names"), "zarr3"
    elif (zarray := read_json(url, ".zarray", so)) is not None:
        _check_v2_codecs(url, zarray)
        attrs = read_json(url, ".zattrs", so) or {}
        names, driver = attrs.get("_ARRAY_DIMENSIONS"), "zarr"
    elif read_json(url, ".zgroup", so) is not None:
        return _open_multiscale(url, read_json(url, ".zattrs", so) or {}, axes, scale_key, so)
    else:
        raise SourceError(f"{url}: neither a zarr array nor a zarr group (no zarr.json, .zarray)")
    if scale_key is not None:
        raise SourceError(
            f"{url}: a single zarr array has no scales; scale_key {scale_key!r} applies to "
            "OME-Zarr groups"
        )
    spec = {"driver": driver, "kvstore": kvstore_spec(url, so)}
    return TensorStoreSource(
        url,
        spec,
        axes,
        hints,
        storage_options=so,
        detected_axes=axes_from_names(names) or detected_axes,
    )


# The zarr v2 compressors TensorStore's zarr driver reads (it reads no filters).
V2_COMPRESSORS = ("blosc", "zlib", "gzip", "bz2", "zstd")


def _check_v2_codecs(url: str, zarray: dict[str, Any]) -> None:
    """One line naming a zarr v2 filter or compressor this reader cannot undo."""
    filters = zarray.get("filters") or []
    if filters:
        names = ", ".join(str(f.get("id") if isinstance(f, dict) else f) for f in filters)
        raise SourceError(
            f"{url}: zarr v2 filter(s) {names} are not supported (arrays are read without "
            "filters); rewrite the array without them, e.g. as zarr v3 with zarr-python"
        )
    compressor = zarray.get("compressor")
    name = compressor.get("id") if isinstance(compressor, dict) else None
    if compressor is not None and name not in V2_COMPRESSORS:
        raise SourceError(
            f"{url}: zarr v2 compressor {name!r} is not supported (supported: "
            f"{', '.join(V2_COMPRESSORS)})"
        )


def _open_multiscale(
    url: str,
    attributes: dict[str, Any],
    axes: str | None,
    scale_key: str | None,
    storage_options: dict[str, Any] | None,
) -> TensorStoreSource:
    """OME-Zarr 0.4 (`multiscales`) or 0.5 (`ome.multiscales`): one dataset, its voxel size."""
    multiscales = (attributes.get("ome") or {}).get("multiscales") or attributes.get("multiscales")
    if not multiscales:
        raise SourceError(
            f"{url}: a zarr group without OME-Zarr multiscales; name one of its arrays"
        )
    entry = multiscales[0]
    datasets = entry.get("datasets") or []
    paths = [str(d.get("path")) for d in datasets]
    if not datasets:
        raise SourceError(f"{url}: the OME-Zarr multiscales list no datasets")
    if scale_key is None:
        chosen = datasets[0]
    elif scale_key.strip("/") in paths:
        chosen = datasets[paths.index(scale_key.strip("/"))]
    else:
        raise SourceError(
            f"{url}: no multiscale dataset {scale_key!r}; datasets are {', '.join(paths)}"
        )
    axis_entries = entry.get("axes") or []
    names = [
        ("c" if a.get("type") == "channel" else a.get("name")) if isinstance(a, dict) else a
        for a in axis_entries
    ]
    group_axes = axes_from_names(names)
    units = [a.get("unit") if isinstance(a, dict) else None for a in axis_entries]
    outer = _scale(entry.get("coordinateTransformations"), None)
    scale = _scale(chosen.get("coordinateTransformations"), outer)
    resolution = _resolution_nm(group_axes, units, scale)
    return open_zarr(
        f"{url.rstrip('/')}/{chosen['path']}",
        axes,
        None,
        SourceHints(resolution=resolution),
        storage_options,
        detected_axes=group_axes,
    )


def _scale(transforms: Any, outer: list[float] | None) -> list[float] | None:
    """The voxel size a dataset's transformations give, times the multiscale-wide one."""
    if not isinstance(transforms, list):
        return outer
    scale = next(
        (t.get("scale") for t in transforms if isinstance(t, dict) and t.get("type") == "scale"),
        None,
    )
    if not isinstance(scale, list):
        return outer
    if outer is not None and len(outer) == len(scale):
        return [float(s) * float(o) for s, o in zip(scale, outer, strict=True)]
    return [float(s) for s in scale]


def _resolution_nm(
    axes: str | None, units: list[Any], scale: list[float] | None
) -> tuple[float, float, float] | None:
    """x, y, z voxel size in nm, only where every spatial unit is known (else None)."""
    if axes is None or scale is None or len(scale) != len(axes) or len(units) != len(axes):
        return None
    by_axis: dict[str, float] = {}
    for axis, size, unit in zip(axes, scale, units, strict=True):
        factor = UNIT_TO_NM.get(unit) if isinstance(unit, str) else None
        if factor is not None:
            by_axis[axis] = size * factor
    if not all(a in by_axis for a in "xyz"):
        return None
    return (by_axis["x"], by_axis["y"], by_axis["z"])
