"""Segment properties (`neuroglancer_segment_properties`): labels, descriptions, tags and
numbers per segment id, in the inline form Neuroglancer reads.

The info lists the ids (as base-10 strings) once, and each property's values in the same
order: `label` and `description` strings, `tags` as indices into the property's list of
tag names, other texts as `string` properties, numbers with their `data_type`. A
segmentation's `info` names the folder that holds this info (`"segment_properties"`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwright.errors import FormatError

SEGMENT_PROPERTIES_TYPE = "neuroglancer_segment_properties"
SEGMENT_PROPERTIES = "segment_properties"  # the folder a segmentation's info names
NUMBER_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")


def segment_properties_info(
    ids: npt.ArrayLike,
    labels: Sequence[str] | None = None,
    descriptions: Sequence[str] | None = None,
    tags: Sequence[Sequence[str]] | None = None,
    numbers: Mapping[str, np.ndarray] | None = None,
    strings: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The info for these segments: `tags` each segment's tag names; `numbers` each numeric
    property's values (their dtype one of NUMBER_TYPES); `strings` each text property's."""
    values = np.asarray(ids, np.uint64).reshape(-1)
    count = values.size
    properties: list[dict[str, Any]] = []
    for kind, given in (("label", labels), ("description", descriptions)):
        if given is not None:
            _same_length(kind, given, count)
            properties.append({"id": kind, "type": kind, "values": [str(v) for v in given]})
    if tags is not None:
        _same_length("tags", tags, count)
        names = sorted({tag for row in tags for tag in row})
        where = {tag: index for index, tag in enumerate(names)}
        indices = [sorted(where[t] for t in set(row)) for row in tags]
        properties.append({"id": "tags", "type": "tags", "tags": names, "values": indices})
    for name, texts in (strings or {}).items():
        _same_length(name, texts, count)
        properties.append({"id": name, "type": "string", "values": [str(v) for v in texts]})
    for name, column in (numbers or {}).items():
        array = np.asarray(column)
        if array.dtype.name not in NUMBER_TYPES:
            raise FormatError(f"segment property {name!r}: {array.dtype} is no number type "
                              f"Neuroglancer reads ({', '.join(NUMBER_TYPES)})")  # fmt: skip
        _same_length(name, array, count)
        properties.append({"id": name, "type": "number", "data_type": array.dtype.name,
                           "values": array.tolist()})  # fmt: skip
    return {
        "@type": SEGMENT_PROPERTIES_TYPE,
        "inline": {"ids": [str(v) for v in values.tolist()], "properties": properties},
    }


def _same_length(name: str, values: Sequence[Any] | np.ndarray, count: int) -> None:
    if len(values) != count:
        raise FormatError(f"segment property {name!r}: {len(values)} values for {count} ids")
