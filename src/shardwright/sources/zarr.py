"""Zarr v2 and v3 arrays, and OME-Zarr multiscale groups, read through TensorStore."""

from __future__ import annotations

from typing import Any

from shardwright.sources.base import SourceError, SourceHints
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec, read_json

UNIT_TO_NM = {"nanometer": 1.0, "micrometer": 1000.0, "angstrom": 0.1, "millimeter": 1e6}


def _axes_from_names(names: Any) -> str | None:
    """Dimension names usable as axes: exactly x, y, z and optionally c, one letter each."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    letters = "".join(n.lower() for n in names)
    if len(letters) == len(names) and sorted(letters) in (sorted("xyz"), sorted("xyzc")):
        return letters
    return None


def open_zarr(
    url: str,
    axes: str | None = None,
    scale_key: str | None = None,
    hints: SourceHints | None = None,
    storage_options: dict[str, Any] | None = None,
) -> TensorStoreSource:
    so = storage_options
    meta = read_json(url, "zarr.json", so)
    if meta is not None:
        if meta.get("node_type") == "group":
            return _open_multiscale(url, meta.get("attributes", {}), axes, scale_key, so)
        names, driver = meta.get("dimension_names"), "zarr3"
    else:
        if read_json(url, ".zarray", so) is None:
            if read_json(url, ".zgroup", so) is not None:
                attrs = read_json(url, ".zattrs", so) or {}
                return _open_multiscale(url, attrs, axes, scale_key, so)
            raise SourceError(f"{url}: neither a zarr array nor a zarr group")
        names, driver = (read_json(url, ".zattrs", so) or {}).get("_ARRAY_DIMENSIONS"), "zarr"
    spec = {"driver": driver, "kvstore": kvstore_spec(url, so)}
    return TensorStoreSource(url, spec, axes or _axes_from_names(names), hints, storage_options=so)


def _open_multiscale(
    url: str,
    attributes: dict[str, Any],
    axes: str | None,
    scale_key: str | None,
    storage_options: dict[str, Any] | None,
) -> TensorStoreSource:
    multiscales = attributes.get("ome", {}).get("multiscales") or attributes.get("multiscales")
    if not multiscales:
        raise SourceError(f"{url}: a zarr group without OME-Zarr multiscales; name an array")
    entry = multiscales[0]
    datasets = entry.get("datasets", [])
    paths = [d.get("path") for d in datasets]
    if scale_key is None:
        chosen = datasets[0] if datasets else None
    else:
        chosen = next((d for d in datasets if d.get("path") == scale_key), None)
    if chosen is None:
        raise SourceError(f"{url}: no multiscale dataset {scale_key!r}; datasets are {paths}")
    axis_entries = entry.get("axes", [])
    names = [a.get("name") if isinstance(a, dict) else a for a in axis_entries]
    group_axes = _axes_from_names(names)
    resolution = None
    scale = next(
        (
            t.get("scale")
            for t in chosen.get("coordinateTransformations", [])
            if t.get("type") == "scale"
        ),
        None,
    )
    if group_axes and scale and len(scale) == len(group_axes):
        units = [a.get("unit") if isinstance(a, dict) else None for a in axis_entries]
        factors = [UNIT_TO_NM.get(u) if u else None for u in units]
        by_axis = {
            a: (s * f if f is not None else None)
            for a, s, f in zip(group_axes, scale, factors, strict=True)
        }
        if all(by_axis[a] is not None for a in "xyz"):
            resolution = tuple(float(by_axis[a]) for a in "xyz")  # type: ignore[arg-type]
    hints = SourceHints(resolution=resolution)  # type: ignore[arg-type]
    return open_zarr(
        f"{url.rstrip('/')}/{chosen['path']}", axes or group_axes, None, hints, storage_options
    )
