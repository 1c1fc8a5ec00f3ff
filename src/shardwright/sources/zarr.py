"""Zarr v2 and v3 arrays, and OME-Zarr multiscale groups, read through TensorStore.

Only metadata is read here (`zarr.json`, `.zarray`, `.zattrs`); TensorStore does the chunk
I/O, so a box read fetches only the chunks (or inner shard chunks) it touches.
"""

from __future__ import annotations

from typing import Any

from shardwright.errors import SourceError
from shardwright.sources import ome
from shardwright.sources.base import axes_from_names
from shardwright.sources.location import Location, look_at_node
from shardwright.sources.request import SourceRequest
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec


def open_zarr(
    request: SourceRequest, location: Location, detected_axes: str | None = None
) -> TensorStoreSource:
    """A zarr array, or dataset `scale_key` (default: the first) of an OME-Zarr group, from
    the metadata its location holds."""
    url, so = location.url, request.storage_options
    meta = location.document("zarr.json")
    if meta is not None:
        if meta.get("node_type") == "group":
            return _open_multiscale(request, location, meta.get("attributes") or {})
        names, driver = meta.get("dimension_names"), "zarr3"
    elif (zarray := location.document(".zarray")) is not None:
        _check_v2_codecs(url, zarray)
        attrs = location.document(".zattrs") or {}
        names, driver = attrs.get("_ARRAY_DIMENSIONS"), "zarr"
    elif location.has(".zgroup"):
        return _open_multiscale(request, location, location.document(".zattrs") or {})
    else:
        raise SourceError(f"{url}: neither a zarr array nor a zarr group (no zarr.json, .zarray)")
    if request.scale_key is not None:
        raise SourceError(
            f"{url}: a single zarr array has no scales; scale_key {request.scale_key!r} "
            "applies to OME-Zarr groups"
        )
    spec = {"driver": driver, "kvstore": kvstore_spec(url, so)}
    return TensorStoreSource(
        url,
        spec,
        request.axes,
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
    request: SourceRequest, location: Location, attributes: dict[str, Any]
) -> TensorStoreSource:
    """OME-Zarr 0.4 (`multiscales`) or 0.5 (`ome.multiscales`): one dataset, read along the
    group's axes, placed by its transforms (`ome.py`). A bioformats2raw container of one
    series (`bioformats2raw.layout`, the image in `0/`) is that image."""
    url = location.url
    nested = attributes.get("ome")
    layout = (nested if isinstance(nested, dict) else attributes).get("bioformats2raw.layout")
    if layout is not None and not ome.has_multiscales(attributes):
        series = _only_series(request, url)
        return open_zarr(request.at(series.url, scale_key=request.scale_key), series)
    chosen = ome.multiscale(url, attributes, request.scale_key)
    dataset = request.at(f"{url.rstrip('/')}/{chosen.path}")
    node = look_at_node(dataset.url, request.storage_options, ARRAY_KEYS)
    source = open_zarr(dataset, node, detected_axes=chosen.axes)
    source.hints = chosen.hints(source.axes)
    return source


def _only_series(request: SourceRequest, url: str) -> Location:
    """The one image series of a bioformats2raw container (`0/`); several are refused, each
    being an image of its own to name."""
    series = []
    for index in range(2):
        node = look_at_node(f"{url.rstrip('/')}/{index}", request.storage_options, GROUP_KEYS)
        if node.has(*GROUP_KEYS):
            series.append(node)
    if not series:
        raise SourceError(f"{url}: a bioformats2raw container without its series 0/")
    if len(series) > 1:
        raise SourceError(
            f"{url}: a bioformats2raw container of several image series; name one "
            f"({series[0].url}, {series[1].url}, ...)"
        )
    return series[0]


GROUP_KEYS = ("zarr.json", ".zgroup")
ARRAY_KEYS = ("zarr.json", ".zarray", ".zattrs")
