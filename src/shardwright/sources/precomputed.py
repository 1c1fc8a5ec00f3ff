"""Neuroglancer precomputed volumes (sharded or not) read through TensorStore, one scale."""

from __future__ import annotations

from typing import Any

from shardwright.sources.base import SourceError, SourceHints
from shardwright.sources.tensorstore_array import TensorStoreSource, kvstore_spec, read_json


def open_precomputed(
    url: str, scale_key: str | None = None, storage_options: dict[str, Any] | None = None
) -> TensorStoreSource:
    info = read_json(url, "info", storage_options)
    if info is None:
        raise SourceError(f"{url}: no precomputed info file")
    scales = info.get("scales", [])
    keys = [s.get("key") for s in scales]
    index = 0 if scale_key is None else (keys.index(scale_key) if scale_key in keys else -1)
    if index < 0 or not scales:
        raise SourceError(f"{url}: no scale {scale_key!r}; scales are {keys}")
    scale = scales[index]
    hints = SourceHints(
        resolution=tuple(float(r) for r in scale["resolution"]),  # type: ignore[arg-type]
        voxel_offset=tuple(int(v) for v in scale.get("voxel_offset", (0, 0, 0))),  # type: ignore[arg-type]
        layer_type=info.get("type"),
    )
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": kvstore_spec(url, storage_options),
        "scale_index": index,
    }
    # TensorStore's domain starts at the voxel offset; reads here are relative to it.
    return TensorStoreSource(
        url, spec, "xyzc", hints, translate=True, storage_options=storage_options
    )
