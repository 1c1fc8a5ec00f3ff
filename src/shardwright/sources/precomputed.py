"""Neuroglancer precomputed volumes (sharded or not) read through TensorStore, one scale.

Reads take coordinates relative to the scale's voxel offset ([0, size)); the offset itself
travels as a hint, so an output keeps the source's placement.
"""

from __future__ import annotations

from typing import Any

from shardwright.errors import SourceError
from shardwright.sources.base import SourceHints
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec, read_json


def open_precomputed(
    url: str,
    scale_key: str | None = None,
    storage_options: dict[str, Any] | None = None,
    axes: str | None = None,
) -> TensorStoreSource:
    """One scale (scale 0 unless `scale_key` names another) of the volume whose `info` is at url."""
    if axes not in (None, "xyzc"):
        raise SourceError(
            f"{url}: a precomputed volume is x,y,z,c; axes {axes!r} (--source-axes) do not apply"
        )
    info = read_json(url, "info", storage_options)
    if info is None:
        raise SourceError(f"{url}: no precomputed info file")
    if info.get("type") not in ("image", "segmentation"):
        raise SourceError(
            f"{url}: info type {info.get('type')!r} is not a volume (image or segmentation)"
        )
    scales = info.get("scales") or []
    keys = [str(s.get("key")) for s in scales]
    if not scales:
        raise SourceError(f"{url}: info lists no scales")
    if scale_key is None:
        index = 0
    elif scale_key.strip("/") in keys:
        index = keys.index(scale_key.strip("/"))
    else:
        raise SourceError(f"{url}: no scale {scale_key!r}; scales are {', '.join(keys)}")
    scale = scales[index]
    try:
        resolution = tuple(float(r) for r in scale["resolution"])
        offset = tuple(int(v) for v in scale.get("voxel_offset", (0, 0, 0)))
        if len(resolution) != 3 or len(offset) != 3:
            raise ValueError("resolution and voxel_offset need 3 values (x, y, z)")
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(
            f"{url}: scale {keys[index]!r} has a malformed info entry ({exc})"
        ) from exc
    hints = SourceHints(
        resolution=(resolution[0], resolution[1], resolution[2]),
        voxel_offset=(offset[0], offset[1], offset[2]),
        layer_type=info["type"],
    )
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": kvstore_spec(url, storage_options),
        "scale_index": index,
    }
    return TensorStoreSource(
        url, spec, "xyzc", hints, translate=True, storage_options=storage_options
    )
