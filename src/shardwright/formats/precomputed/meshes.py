"""Neuroglancer precomputed meshes: the multi-resolution manifest, the mesh `info`, legacy
single-resolution fragments, and a legacy mesh re-encoded as one level of detail.

Sharded multi-resolution meshes store, under each segment id, the manifest as the indexed blob
with the fragment data placed immediately before it (a reader finds the fragments from the
manifest's offset and the fragment sizes it lists). The legacy format (`<id>:0` JSON naming
fragment files of float32 vertices and uint32 triangles) has no sharded form; it becomes a
multi-resolution mesh with one level of detail, Draco-encoded (DracoPy) with the integer vertex
quantization the format requires. Bytes in, bytes out: no I/O.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.errors import MeshFormatError
from shardwright.version import install_command

MULTILOD_TYPE = "neuroglancer_multilod_draco"
LEGACY_TYPE = "neuroglancer_legacy_mesh"
IDENTITY_TRANSFORM = (1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0)
LEGACY_QUANTIZATION_BITS = 16


# -- the multi-resolution manifest ------------------------------------------------------------
@dataclass(frozen=True)
class MultiLodManifest:
    """One segment's `<id>.index`: octree geometry and the byte size of every fragment."""

    chunk_shape: tuple[float, float, float]
    grid_origin: tuple[float, float, float]
    lod_scales: tuple[float, ...]
    vertex_offsets: np.ndarray  # [num_lods, 3] float32
    fragment_positions: tuple[np.ndarray, ...]  # per lod: [3, n] uint32 (x, y, z rows)
    fragment_sizes: tuple[np.ndarray, ...]  # per lod: [n] uint32 bytes

    @property
    def num_lods(self) -> int:
        return len(self.lod_scales)

    @property
    def data_nbytes(self) -> int:
        """Bytes of the fragment data file this manifest describes."""
        return int(sum(int(s.sum(dtype=np.uint64)) for s in self.fragment_sizes))

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> MultiLodManifest:
        """Parse a manifest; MeshFormatError if it is truncated or has bytes left over."""
        view = memoryview(data)
        try:
            chunk_shape = struct.unpack_from("<3f", view, 0)
            grid_origin = struct.unpack_from("<3f", view, 12)
            (num_lods,) = struct.unpack_from("<I", view, 24)
            offset = 28
            lod_scales = struct.unpack_from(f"<{num_lods}f", view, offset)
            offset += 4 * num_lods
            vertex_offsets = np.frombuffer(view, "<f4", 3 * num_lods, offset).reshape(-1, 3)
            offset += 12 * num_lods
            counts = np.frombuffer(view, "<u4", num_lods, offset)
            offset += 4 * num_lods
            positions, sizes = [], []
            for count in counts.tolist():
                positions.append(np.frombuffer(view, "<u4", 3 * count, offset).reshape(3, -1))
                offset += 12 * count
                sizes.append(np.frombuffer(view, "<u4", count, offset))
                offset += 4 * count
        except (struct.error, ValueError) as exc:
            raise MeshFormatError(f"manifest is truncated ({len(view)} bytes): {exc}") from None
        if offset != len(view):
            raise MeshFormatError(
                f"manifest has {len(view) - offset} bytes after its last level of detail"
            )
        return cls(
            tuple(chunk_shape),
            tuple(grid_origin),
            tuple(lod_scales),
            vertex_offsets,
            tuple(positions),
            tuple(sizes),
        )

    def to_bytes(self) -> bytes:
        parts = [
            struct.pack("<3f", *self.chunk_shape),
            struct.pack("<3f", *self.grid_origin),
            struct.pack("<I", self.num_lods),
            struct.pack(f"<{self.num_lods}f", *self.lod_scales),
            np.asarray(self.vertex_offsets, "<f4").tobytes(),
            np.asarray([s.size for s in self.fragment_sizes], "<u4").tobytes(),
        ]
        for positions, sizes in zip(self.fragment_positions, self.fragment_sizes, strict=True):
            parts.append(np.asarray(positions, "<u4").tobytes())
            parts.append(np.asarray(sizes, "<u4").tobytes())
        return b"".join(parts)


def check_fragment_data(segment_id: int, manifest: bytes, data_nbytes: int) -> None:
    """The manifest parses and its fragment sizes add up to the fragment data's size."""
    try:
        parsed = MultiLodManifest.from_bytes(manifest)
    except MeshFormatError as exc:
        raise MeshFormatError(f"segment {segment_id}: {segment_id}.index: {exc}") from None
    if parsed.data_nbytes != data_nbytes:
        raise MeshFormatError(
            f"segment {segment_id}: its manifest {segment_id}.index lists fragments of "
            f"{parsed.data_nbytes} bytes in all, but its fragment data file {segment_id} holds "
            f"{data_nbytes} bytes"
        )


# -- info ------------------------------------------------------------------------------------
def check_multilod_info(info: Mapping[str, Any]) -> None:
    """The members a multi-resolution mesh `info` must have, with the values allowed."""
    bits = info.get("vertex_quantization_bits")
    if bits not in (10, 16):
        raise MeshFormatError(f"mesh info: vertex_quantization_bits must be 10 or 16, got {bits!r}")
    transform = info.get("transform", list(IDENTITY_TRANSFORM))
    if not (isinstance(transform, list) and len(transform) == 12):
        raise MeshFormatError(
            f"mesh info: transform must be a list of 12 numbers, got {transform!r}"
        )
    if not isinstance(info.get("lod_scale_multiplier", 1.0), int | float):
        raise MeshFormatError("mesh info: lod_scale_multiplier must be a number")


def multilod_info_for_legacy(source_info: Mapping[str, Any]) -> dict[str, Any]:
    """The `info` of the multi-resolution meshes made from legacy meshes (vertices in model
    space, so the transform is the identity); other members (segment_properties) are kept."""
    kept = {k: v for k, v in source_info.items() if k not in ("@type", "sharding")}
    return {
        **kept,
        "@type": MULTILOD_TYPE,
        "vertex_quantization_bits": LEGACY_QUANTIZATION_BITS,
        "transform": list(IDENTITY_TRANSFORM),
        "lod_scale_multiplier": 1.0,
    }


# -- legacy single-resolution meshes ------------------------------------------------------------
def legacy_fragment_names(segment_id: int, manifest: bytes) -> list[str]:
    """The fragment files a legacy `<id>:0` JSON names."""
    try:
        fragments = json.loads(manifest)["fragments"]
    except (ValueError, KeyError, TypeError) as exc:
        raise MeshFormatError(
            f"segment {segment_id}: {segment_id}:0 is not a JSON object with 'fragments' ({exc})"
        ) from None
    if not isinstance(fragments, list) or not all(isinstance(f, str) for f in fragments):
        raise MeshFormatError(f"segment {segment_id}: {segment_id}:0 'fragments' is not a list")
    return fragments


def decode_legacy_fragment(
    segment_id: int, name: str, data: bytes
) -> tuple[np.ndarray, np.ndarray]:
    """(vertices [n, 3] float32 nm, triangles [m, 3] uint32) of one legacy fragment file."""
    if len(data) < 4:
        raise MeshFormatError(f"segment {segment_id}: fragment {name} is {len(data)} bytes long")
    (count,) = struct.unpack_from("<I", data)
    rest = len(data) - 4 - 12 * count
    if rest < 0 or rest % 12:
        raise MeshFormatError(
            f"segment {segment_id}: fragment {name} declares {count} vertices but holds "
            f"{len(data)} bytes (not 4 + 12 x vertices + 12 x triangles)"
        )
    vertices = np.frombuffer(data, "<f4", 3 * count, 4).reshape(-1, 3)
    triangles = np.frombuffer(data, "<u4", rest // 4, 4 + 12 * count).reshape(-1, 3)
    if triangles.size and int(triangles.max()) >= count:
        raise MeshFormatError(
            f"segment {segment_id}: fragment {name} has a triangle vertex index "
            f"{int(triangles.max())} beyond its {count} vertices"
        )
    return vertices, triangles


def legacy_to_multilod(
    segment_id: int, fragments: Sequence[tuple[str, bytes]]
) -> tuple[bytes, bytes]:
    """(manifest, fragment data) of one level of detail holding all of a legacy mesh.

    The fragment is one octree node at (0, 0, 0) whose box is the mesh's bounding box; vertices
    are quantized to integers in [0, 2**16 - 1] across it and Draco-encoded with a
    quantization that maps those integers to themselves (the format does not support Draco's
    own quantization), keeping vertex and triangle order.
    """
    vertices, triangles = [], []
    base = 0
    for name, data in fragments:
        v, t = decode_legacy_fragment(segment_id, name, data)
        vertices.append(v)
        triangles.append(t.astype(np.uint32) + np.uint32(base))
        base += len(v)
    points = np.concatenate(vertices) if vertices else np.zeros((0, 3), np.float32)
    faces = np.concatenate(triangles) if triangles else np.zeros((0, 3), np.uint32)
    if not np.isfinite(points).all():
        raise MeshFormatError(f"segment {segment_id}: a legacy fragment has non-finite vertices")
    top = (1 << LEGACY_QUANTIZATION_BITS) - 1
    low = points.min(axis=0) if len(points) else np.zeros(3, np.float32)
    high = points.max(axis=0) if len(points) else np.ones(3, np.float32)
    extent = np.maximum(high.astype(np.float64) - low, 1e-6).astype(np.float32)
    quantized = np.rint((points - low) / extent * top).clip(0, top).astype(np.float32)
    if len(faces):
        data = draco_fragment(quantized, faces, LEGACY_QUANTIZATION_BITS, preserve_order=True)
        sizes = np.asarray([len(data)], np.uint32)
        positions = np.zeros((3, 1), np.uint32)
    else:
        data, sizes, positions = b"", np.zeros(0, np.uint32), np.zeros((3, 0), np.uint32)
    manifest = MultiLodManifest(
        chunk_shape=(float(extent[0]), float(extent[1]), float(extent[2])),
        grid_origin=(float(low[0]), float(low[1]), float(low[2])),
        lod_scales=(1.0,),
        vertex_offsets=np.zeros((1, 3), np.float32),
        fragment_positions=(positions,),
        fragment_sizes=(sizes,),
    )
    return manifest.to_bytes(), bytes(data)


# -- fragments ---------------------------------------------------------------------------------
def draco_fragment(
    quantized: np.ndarray, faces: np.ndarray, bits: int, *, preserve_order: bool = False
) -> bytes:
    """One fragment's Draco bytes: integer vertex positions in [0, 2**bits - 1] (float32
    holding integers) encoded with a quantization that maps them to themselves, as the
    format requires (it does not support Draco's own quantization)."""
    try:
        import DracoPy
    except ImportError:
        raise MeshFormatError(
            "encoding multi-resolution meshes needs a Draco encoder: " + install_command("meshes")
        ) from None
    top = (1 << bits) - 1
    return bytes(
        DracoPy.encode(
            quantized,
            faces,
            quantization_bits=bits,
            quantization_range=top,
            quantization_origin=np.zeros(3),
            preserve_order=preserve_order,
        )
    )


def zorder(positions: np.ndarray) -> np.ndarray:
    """The order that sorts fragment positions ([n, 3] uint32, x y z) along the Z-curve
    the manifest requires (x the lowest bit of each triple)."""
    codes = np.zeros(len(positions), np.uint64)
    values = np.asarray(positions, np.uint64)
    for bit in range(21):  # 3 x 21 bits fit a uint64
        for axis in range(3):
            codes |= ((values[:, axis] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(
                3 * bit + axis
            )
    return np.argsort(codes, kind="stable")
