"""Zarr v2 and v3 arrays, and OME-Zarr multiscale groups, read through TensorStore.

Only metadata is read here (`zarr.json`, `.zarray`, `.zattrs`); TensorStore does the chunk
I/O, so a box read fetches only the chunks (or inner shard chunks) it touches.
"""

from __future__ import annotations

from typing import Any

from shardwright.errors import SourceError
from shardwright.sources import ome
from shardwright.sources.base import SourceHints, axes_from_names
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec, read_json


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
    """OME-Zarr 0.4 (`multiscales`) or 0.5 (`ome.multiscales`): one dataset, read along the
    group's axes, placed by its transforms (`ome.py`). A bioformats2raw container of one
    series (`bioformats2raw.layout`, the image in `0/`) is that image."""
    nested = attributes.get("ome")
    layout = (nested if isinstance(nested, dict) else attributes).get("bioformats2raw.layout")
    if layout is not None and not ome.has_multiscales(attributes):
        return open_zarr(_only_series(url, storage_options), axes, scale_key, None, storage_options)
    chosen = ome.multiscale(url, attributes, scale_key)
    source = open_zarr(
        f"{url.rstrip('/')}/{chosen.path}",
        axes,
        None,
        None,
        storage_options,
        detected_axes=chosen.axes,
    )
    source.hints = chosen.hints(source.axes)
    return source


def _only_series(url: str, storage_options: dict[str, Any] | None) -> str:
    """The one image series of a bioformats2raw container (`0/`); several are refused, each
    being an image of its own to name."""
    series = []
    for index in range(2):
        path = f"{url.rstrip('/')}/{index}"
        if any(read_json(path, key, storage_options) is not None for key in GROUP_KEYS):
            series.append(path)
    if not series:
        raise SourceError(f"{url}: a bioformats2raw container without its series 0/")
    if len(series) > 1:
        raise SourceError(
            f"{url}: a bioformats2raw container of several image series; name one "
            f"({series[0]}, {series[1]}, ...)"
        )
    return series[0]


GROUP_KEYS = ("zarr.json", ".zgroup")
