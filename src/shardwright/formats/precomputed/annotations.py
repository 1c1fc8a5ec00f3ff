"""Precomputed annotations (`neuroglancer_annotations_v1`): the info, and the bytes of one
annotation and of a list of them.

Every annotation of a collection is one fixed-size record: its geometry as float32 (a point's
position; a line's or box's two corners; an ellipsoid's centre and radii), then its property
values, then padding to a multiple of 4 bytes. The by_id index stores one record followed by
each relationship's segment ids (uint32 count, uint64 ids); the relationship and spatial
indexes store lists: a uint64 count, the records, then the ids.

The format orders property values by size (4-byte types, then 2-byte, then 1-byte); readers
that lay them out in the info's order (neuroglancer's Python reader) agree only when the info
lists them in that order, so the schema sorts them so, keeping the given order within a size.
Records are built as one numpy structured array for many annotations at once, and entries
are packed many at once into one buffer: no Python object per annotation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwright.errors import FormatError

ANNOTATIONS_TYPE = "neuroglancer_annotations_v1"
# Annotation kind -> (the info's annotation_type, the table's geometry columns).
CORNERS = ("ax", "ay", "az", "bx", "by", "bz")
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "point": ("POINT", ("x", "y", "z")),
    "line": ("LINE", CORNERS),
    "axis_aligned_bounding_box": ("AXIS_ALIGNED_BOUNDING_BOX", CORNERS),
    "ellipsoid": ("ELLIPSOID", ("x", "y", "z", "rx", "ry", "rz")),
}
# Property type -> (numpy dtype, count, size of one value). rgb/rgba are uint8 vectors.
PROPERTY_TYPES: dict[str, tuple[str, int, int]] = {
    "uint32": ("<u4", 1, 4), "int32": ("<i4", 1, 4), "float32": ("<f4", 1, 4),
    "uint16": ("<u2", 1, 2), "int16": ("<i2", 1, 2),
    "uint8": ("u1", 1, 1), "int8": ("i1", 1, 1), "rgb": ("u1", 3, 1), "rgba": ("u1", 4, 1),
}  # fmt: skip
PROPERTY_ID = re.compile(r"^[a-z][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class AnnotationProperty:
    """One per-annotation value the info declares (`enum_values`/`enum_labels` together)."""

    id: str
    type: str
    description: str | None = None
    enum_values: tuple[int | float, ...] | None = None
    enum_labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not PROPERTY_ID.fullmatch(self.id):
            raise FormatError(
                f"property {self.id!r}: an id must start with a lowercase letter and hold only "
                "letters, digits and _ (Neuroglancer's rule)"
            )
        if self.type not in PROPERTY_TYPES:
            raise FormatError(f"property {self.id!r}: unknown type {self.type!r}")
        if (self.enum_values is None) != (self.enum_labels is None):
            raise FormatError(f"property {self.id!r}: enum_values and enum_labels go together")
        if self.enum_values is not None and self.enum_labels is not None:
            if self.type in ("rgb", "rgba"):
                raise FormatError(f"property {self.id!r}: an {self.type} property has no enum")
            if len(self.enum_values) != len(self.enum_labels):
                raise FormatError(
                    f"property {self.id!r}: {len(self.enum_values)} enum values but "
                    f"{len(self.enum_labels)} labels"
                )

    @property
    def size(self) -> int:
        return PROPERTY_TYPES[self.type][2]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.description is not None:
            out["description"] = self.description
        if self.enum_values is not None and self.enum_labels is not None:
            out["enum_values"] = list(self.enum_values)
            out["enum_labels"] = list(self.enum_labels)
        return out


@dataclass(frozen=True)
class AnnotationSchema:
    """What every annotation of a collection holds: its kind's geometry, its properties (in
    the format's order) and the names of its relationships."""

    kind: str
    properties: tuple[AnnotationProperty, ...] = ()
    relationships: tuple[str, ...] = ()
    rank: int = 3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FormatError(f"unknown annotation type {self.kind!r} ({', '.join(KINDS)})")
        ordered = tuple(sorted(self.properties, key=lambda p: -p.size))  # stable within a size
        object.__setattr__(self, "properties", ordered)
        names = [p.id for p in ordered]
        if len(set(names)) != len(names):
            raise FormatError(f"property ids repeat: {', '.join(names)}")
        if len(set(self.relationships)) != len(self.relationships):
            raise FormatError(f"relationships repeat: {', '.join(self.relationships)}")

    @property
    def geometry_columns(self) -> tuple[str, ...]:
        return KINDS[self.kind][1]

    @property
    def record_dtype(self) -> np.dtype:
        """One annotation's record: geometry, properties, padding to a multiple of 4."""
        fields: list[tuple[Any, ...]] = [("geometry", "<f4", (len(self.geometry_columns),))]
        offset = 4 * len(self.geometry_columns)
        for prop in self.properties:
            dtype, count, size = PROPERTY_TYPES[prop.type]
            fields.append((prop.id, dtype, (count,)) if count > 1 else (prop.id, dtype))
            offset += size * count
        if offset % 4:
            fields.append(("_padding", "u1", (4 - offset % 4,)))
        return np.dtype(fields)

    def records(
        self, geometry: npt.ArrayLike, properties: Mapping[str, npt.ArrayLike] | None = None
    ) -> np.ndarray:
        """The records of N annotations: `geometry` [N, columns] (in the order of
        `geometry_columns`), each property's N values ([N, 3] or [N, 4] for rgb/rgba)."""
        coords = np.asarray(geometry, dtype="<f4")
        if coords.ndim != 2 or coords.shape[1] != len(self.geometry_columns):
            raise FormatError(
                f"{self.kind} geometry must be [N, {len(self.geometry_columns)}], got "
                f"{coords.shape}"
            )
        out = np.zeros(coords.shape[0], self.record_dtype)
        out["geometry"] = coords
        given = dict(properties or {})
        missing = [p.id for p in self.properties if p.id not in given]
        if missing:
            raise FormatError(f"no values for properties {', '.join(missing)}")
        for prop in self.properties:
            out[prop.id] = np.asarray(given[prop.id])
        return out

    def info(
        self,
        resolution_nm: Sequence[float],
        lower_bound: Sequence[float],
        upper_bound: Sequence[float],
        by_id: Mapping[str, Any],
        relationships: Sequence[Mapping[str, Any]],
        spatial: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """The collection's `info`: x, y, z in units of `resolution_nm` (stored in metres, as
        Neuroglancer's coordinate spaces are), and its indexes' entries as given."""
        if len(relationships) != len(self.relationships):
            raise FormatError("one index entry per relationship")
        return {
            "@type": ANNOTATIONS_TYPE,
            "dimensions": {
                axis: [float(nm) * 1e-9, "m"] for axis, nm in zip("xyz", resolution_nm, strict=True)
            },
            "lower_bound": [float(v) for v in lower_bound],
            "upper_bound": [float(v) for v in upper_bound],
            "annotation_type": KINDS[self.kind][0],
            "properties": [p.to_json() for p in self.properties],
            "relationships": [
                {"id": name, **entry}
                for name, entry in zip(self.relationships, relationships, strict=True)
            ],
            "by_id": dict(by_id),
            "spatial": [dict(level) for level in spatial],
        }


def schema_of_info(info: Mapping[str, Any]) -> AnnotationSchema:
    """The schema an annotation `info` declares (FormatError where it is not one)."""
    kinds = {name: kind for kind, (name, _) in KINDS.items()}
    kind = kinds.get(str(info.get("annotation_type", "")).upper())
    if info.get("@type") != ANNOTATIONS_TYPE or kind is None:
        raise FormatError(f"not a {ANNOTATIONS_TYPE} info of a known annotation type")
    try:
        properties = tuple(
            AnnotationProperty(p["id"], p["type"], p.get("description"),
                               tuple(p["enum_values"]) if "enum_values" in p else None,
                               tuple(p["enum_labels"]) if "enum_labels" in p else None)
            for p in info.get("properties", [])
        )  # fmt: skip
        relationships = tuple(str(r["id"]) for r in info.get("relationships", []))
    except (KeyError, TypeError) as exc:
        raise FormatError(f"an annotation info's property or relationship lacks {exc}") from None
    return AnnotationSchema(kind, properties, relationships, rank=len(info.get("dimensions", {})))


def decode_multiple(schema: AnnotationSchema, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(records, ids) of a list as the relationship and spatial indexes store it."""
    record = schema.record_dtype
    if len(data) < 8:
        raise FormatError("an annotation list shorter than its count")
    count = int(np.frombuffer(data, "<u8", 1)[0])
    if len(data) != 8 + count * (record.itemsize + 8):
        raise FormatError(f"an annotation list of {count} holds {len(data)} bytes")
    records = np.frombuffer(data, record, count, 8)
    ids = np.frombuffer(data, "<u8", count, 8 + count * record.itemsize)
    return records, ids


def decode_single(schema: AnnotationSchema, data: bytes) -> tuple[np.void, list[np.ndarray]]:
    """(record, each relationship's segment ids) of one by_id entry."""
    record = schema.record_dtype
    if len(data) < record.itemsize:
        raise FormatError("an annotation shorter than its record")
    offset, related = record.itemsize, []
    for _ in schema.relationships:
        if len(data) < offset + 4:
            raise FormatError("an annotation's relationship list is cut short")
        count = int(np.frombuffer(data, "<u4", 1, offset)[0])
        if len(data) < offset + 4 + 8 * count:
            raise FormatError("an annotation's relationship list is cut short")
        related.append(np.frombuffer(data, "<u8", count, offset + 4))
        offset += 4 + 8 * count
    if offset != len(data):
        raise FormatError(f"an annotation of {len(data)} bytes, {offset} expected")
    return np.frombuffer(data, record, 1)[0], related


def bounding_boxes(kind: str, geometry: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Each annotation's bounding box (low, high) from its geometry [N, columns]: a point's
    position twice, a line's or box's corners ordered, an ellipsoid's centre -/+ radii."""
    values = np.asarray(geometry, np.float64)
    if kind == "point":
        return values, values
    if kind == "ellipsoid":
        return values[:, :3] - values[:, 3:], values[:, :3] + values[:, 3:]
    corner_a, corner_b = values[:, :3], values[:, 3:]
    return np.minimum(corner_a, corner_b), np.maximum(corner_a, corner_b)


def encode_singles(
    records: np.ndarray, related: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """N annotations as the by_id index stores each, packed in one buffer: its record, then
    for each relationship a uint32 count and the segment ids (`related` [N, relationships],
    one segment per relationship, 0 meaning none). Returns (bytes, each entry's size)."""
    count, width = records.shape[0], records.dtype.itemsize
    segments = np.asarray(related, "<u8").reshape(count, -1)
    matrix = np.zeros((count, width + 12 * segments.shape[1]), np.uint8)
    matrix[:, :width] = np.ascontiguousarray(records).view(np.uint8).reshape(count, width)
    keep = np.ones(matrix.shape, bool)
    for column in range(segments.shape[1]):
        base = width + 12 * column
        linked = segments[:, column] != 0
        matrix[:, base : base + 4] = linked.astype("<u4")[:, None].view(np.uint8)
        matrix[:, base + 4 : base + 12] = segments[:, column, None].view(np.uint8)
        keep[~linked, base + 4 : base + 12] = False
    return matrix[keep], keep.sum(axis=1)


def encode_lists(
    records: np.ndarray, ids: npt.ArrayLike, counts: npt.ArrayLike
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Lists of annotations as the relationship and spatial indexes store each (a uint64
    count, the records, then the ids), packed in one buffer: the rows are grouped, the first
    `counts[0]` rows making the first list, and so on. Returns (bytes, each list's size).
    Built in 4-byte words (records are padded to 4 bytes): no Python step per row."""
    values = np.asarray(ids, "<u8").reshape(-1)
    sizes = np.asarray(counts, np.int64).reshape(-1)
    rows, record_words = values.size, records.dtype.itemsize // 4
    if records.shape[0] != rows or int(sizes.sum()) != rows:
        raise FormatError(f"{records.shape[0]} records, {rows} ids, {int(sizes.sum())} counted")
    words = 2 + sizes * (record_words + 2)
    entry = np.cumsum(words) - words
    out = np.empty(int(words.sum()), "<u4")
    out[entry[:, None] + np.arange(2)] = sizes.astype("<u8")[:, None].view("<u4")
    group = np.repeat(np.arange(sizes.size), sizes)
    place = np.arange(rows) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # within its list
    first_record = entry[group] + 2 + place * record_words
    out[first_record[:, None] + np.arange(record_words)] = (
        np.ascontiguousarray(records).view("<u4").reshape(rows, record_words)
    )
    first_id = entry[group] + 2 + sizes[group] * record_words + 2 * place
    out[first_id[:, None] + np.arange(2)] = values[:, None].view("<u4")
    return out.view(np.uint8), 4 * words
