"""Anything TensorStore opens, named by its spec: a `.json` file holding the spec, or the JSON
text itself (`{"driver": "zarr", "kvstore": ...}`), for sources no other reader here names
(a sub-array through an index transform, a kvstore stack, an OCDBT database, ...).

The array is read in its own axis order: the spec's dimension labels where they are x, y, z
(and c), else C-order z,y,x (c,z,y,x), else `axes`. A domain that does not start at 0 (a
`translate_to`, a sliced transform) places the array there: its first voxel is the offset.
"""

from __future__ import annotations

from shardwright.errors import NAMED, SourceError
from shardwright.sources.base import SourceHints, json_object
from shardwright.sources.request import SourceRequest
from shardwright.sources.tensorstore_array import INLINE_SPEC, TensorStoreSource


def open_spec(request: SourceRequest) -> TensorStoreSource:
    """The array a TensorStore spec names (the request's URL: the JSON or a file holding it)."""
    text_or_path, axes = request.url, request.axes
    if request.scale_key is not None:
        raise SourceError(f"{text_or_path}: a TensorStore spec names one array; no scale_key")
    if request.storage_options:
        raise SourceError(
            f"{text_or_path}: a TensorStore spec carries its own kvstore options; "
            "{source_storage_options} do not apply",
            source_storage_options=NAMED,
        )
    if text_or_path.lstrip().startswith("{"):
        text, name = text_or_path, "the TensorStore spec"
    else:
        name = text_or_path
        try:
            with open(text_or_path.removeprefix("file://"), encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise SourceError(f"{name}: source does not exist") from None
        except OSError as exc:
            raise SourceError(f"{name}: cannot read ({exc})") from exc
    spec = json_object(text, name)
    if not isinstance(spec.get("driver"), str):
        raise SourceError(
            f'{name}: not a TensorStore spec (a JSON object with a "driver", e.g. '
            '{"driver": "zarr3", "kvstore": "file:///data/volume.zarr/"})'
        )
    url = name if name != "the TensorStore spec" else f"{INLINE_SPEC}{spec['driver']}"
    source = TensorStoreSource(url, spec, axes)
    source.root = source.data_location()
    # A translated domain places the array: its first index along x, y, z is the offset.
    origin = {"z": 0, **dict(zip(source.axes, source.origin, strict=True))}  # 2-D: z at 0
    if any(origin[a] for a in "xyz"):
        offset = (origin["x"], origin["y"], origin["z"])
        source.hints = SourceHints(voxel_offset=offset, placed_by="its TensorStore domain")
    return source
