"""Neuroglancer precomputed skeletons: the `info` and the encoded skeleton of one segment.

A skeleton is stored the same way sharded or not (the sharded form keys it by segment id), so
converting copies its bytes; this module checks them against the `info`'s vertex attributes,
so a truncated or mis-sized file is refused with its segment id. Bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shardwright.errors import SkeletonFormatError

SKELETON_TYPE = "neuroglancer_skeletons"
ATTRIBUTE_TYPES = ("float32", "int8", "uint8", "int16", "uint16", "int32", "uint32")


def vertex_attributes(info: Mapping[str, Any]) -> list[tuple[str, np.dtype, int]]:
    """(id, little-endian dtype, components) of every extra vertex attribute, validated."""
    attributes = info.get("vertex_attributes", []) or []
    if not isinstance(attributes, Sequence) or isinstance(attributes, str):
        raise SkeletonFormatError("skeleton info: vertex_attributes must be a list")
    out, seen = [], set()
    for attribute in attributes:
        try:
            name, data_type, components = (
                attribute["id"],
                attribute["data_type"],
                attribute["num_components"],
            )
        except (KeyError, TypeError):
            raise SkeletonFormatError(
                f"skeleton info: vertex attribute {attribute!r} needs id, data_type and "
                "num_components"
            ) from None
        if not isinstance(name, str) or not name or name in seen:
            raise SkeletonFormatError(f"skeleton info: attribute id {name!r} is empty or repeated")
        if data_type not in ATTRIBUTE_TYPES:
            raise SkeletonFormatError(
                f"skeleton info: attribute {name!r} has data_type {data_type!r}; expected one "
                f"of {ATTRIBUTE_TYPES}"
            )
        if isinstance(components, bool) or not isinstance(components, int) or components < 1:
            raise SkeletonFormatError(
                f"skeleton info: attribute {name!r} num_components must be a positive integer"
            )
        seen.add(name)
        out.append((name, np.dtype(data_type).newbyteorder("<"), components))
    return out


def check_skeleton(
    segment_id: int, data: bytes, attributes: Sequence[tuple[str, np.dtype, int]]
) -> tuple[int, int]:
    """(vertices, edges) of one encoded skeleton whose size matches its header and the
    attributes; SkeletonFormatError naming the segment otherwise."""
    if len(data) < 8:
        raise SkeletonFormatError(
            f"segment {segment_id}: skeleton is {len(data)} bytes, shorter than its header"
        )
    vertices, edges = struct.unpack_from("<II", data)
    per_vertex = 12 + sum(dtype.itemsize * n for _, dtype, n in attributes)
    expected = 8 + vertices * per_vertex + 8 * edges
    if len(data) != expected:
        raise SkeletonFormatError(
            f"segment {segment_id}: skeleton of {vertices} vertices and {edges} edges with "
            f"attributes {[name for name, _, _ in attributes]} must be {expected} bytes, "
            f"it is {len(data)}"
        )
    if edges:
        ends = np.frombuffer(data, "<u4", 2 * edges, 8 + 12 * vertices)
        if int(ends.max()) >= vertices:
            raise SkeletonFormatError(
                f"segment {segment_id}: an edge names vertex {int(ends.max())} of {vertices}"
            )
    return vertices, edges


def encode_skeleton(
    vertices: np.ndarray, edges: np.ndarray, attributes: Sequence[np.ndarray] = ()
) -> bytes:
    """An encoded skeleton: vertex count, edge count, positions [n, 3] float32, edges
    [m, 2] uint32, then each vertex attribute's values in the `info`'s order."""
    vertices = np.ascontiguousarray(vertices, "<f4").reshape(-1, 3)
    edges = np.ascontiguousarray(edges, "<u4").reshape(-1, 2)
    parts = [struct.pack("<II", len(vertices), len(edges)), vertices.tobytes(), edges.tobytes()]
    for values in attributes:
        if len(values) != len(vertices):
            raise SkeletonFormatError(
                f"a vertex attribute has {len(values)} values for {len(vertices)} vertices"
            )
        parts.append(np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes())
    return b"".join(parts)
