"""Unsharded meshes and skeletons as segmentation pipelines write them, for the tests.

A small precomputed segmentation (written by TensorStore) whose `info` names a `mesh` and a
`skeletons` directory: multi-resolution Draco meshes (two levels of detail, fragments in
Z-curve order, `<id>.index` + `<id>`), skeletons with a radius and a uint8 attribute, and,
for the legacy converter, single-resolution meshes (`<id>:0` JSON + fragment files).
"""

from __future__ import annotations

import json
import pathlib
import struct

import DracoPy
import numpy as np
import tensorstore as ts

QUANTIZATION_BITS = 10
SKELETON_ATTRIBUTES = [
    {"id": "radius", "data_type": "float32", "num_components": 1},
    {"id": "vertex_types", "data_type": "uint8", "num_components": 1},
]
TETRAHEDRON_FACES = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], dtype=np.uint32)


def segment_ids(count: int, seed: int = 0) -> np.ndarray:
    """`count` distinct ids spread over uint64, the largest ones (2**64 - 1 ...) and small ones."""
    rng = np.random.default_rng(seed)
    edge = [2**64 - 1, 2**64 - 2, 2**64 - 3, 2**63, 2**63 - 1, 2**32, 1, 2, 3]
    spread = rng.integers(4, 2**64 - 4, size=count - len(edge), dtype=np.uint64)
    ids = np.unique(np.concatenate([np.array(edge, np.uint64), spread]))
    assert ids.size == count
    return ids


def _fragment_pool(size: int, seed: int) -> list[bytes]:
    """Draco tetrahedra with integer vertices in [0, 2**bits): the fragment payloads."""
    rng = np.random.default_rng(seed)
    top = (1 << QUANTIZATION_BITS) - 1
    pool = []
    for _ in range(size):
        points = rng.integers(0, top + 1, size=(4, 3)).astype(np.float32)
        pool.append(
            DracoPy.encode(
                points,
                TETRAHEDRON_FACES,
                quantization_bits=QUANTIZATION_BITS,
                quantization_range=top,
                quantization_origin=np.zeros(3),
                preserve_order=True,
            )
        )
    return pool


def write_multilod_meshes(
    directory: pathlib.Path, ids: np.ndarray, seed: int = 1, origin_high: float = 1000.0
) -> None:
    """`info`, `<id>.index` and `<id>` for each id: lod 0 with 1-3 fragments, lod 1 with one;
    grid origins drawn from [0, origin_high) stored-model units."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "info").write_text(
        json.dumps(
            {
                "@type": "neuroglancer_multilod_draco",
                "vertex_quantization_bits": QUANTIZATION_BITS,
                "transform": [8, 0, 0, 0, 0, 8, 0, 0, 0, 0, 40, 0],
                "lod_scale_multiplier": 1.0,
            }
        )
    )
    rng = np.random.default_rng(seed)
    pool = _fragment_pool(48, seed)
    for segment in ids.tolist():
        count = int(rng.integers(1, 4))
        # Z-curve order of distinct octree nodes of a 2x2x2 grid: x bit lowest.
        nodes = sorted(rng.choice(8, size=count, replace=False).tolist())
        lod0 = np.array([[n & 1, (n >> 1) & 1, (n >> 2) & 1] for n in nodes], np.uint32).T
        fragments = [pool[int(i)] for i in rng.integers(0, len(pool), size=count + 1)]
        origin = rng.uniform(0, origin_high, 3).astype(np.float32)
        manifest = b"".join(
            [
                struct.pack("<3f", 16.0, 16.0, 16.0),
                struct.pack("<3f", *origin.tolist()),
                struct.pack("<I", 2),
                struct.pack("<2f", 1.0, 2.0),
                np.zeros(6, "<f4").tobytes(),
                np.array([count, 1], "<u4").tobytes(),
                lod0.astype("<u4").tobytes(),
                np.array([len(f) for f in fragments[:count]], "<u4").tobytes(),
                np.zeros(3, "<u4").tobytes(),
                np.array([len(fragments[count])], "<u4").tobytes(),
            ]
        )
        (directory / f"{segment}.index").write_bytes(manifest)
        (directory / str(segment)).write_bytes(b"".join(fragments))


def skeleton_bytes(rng: np.random.Generator, vertex_types: bool = True) -> bytes:
    vertices = int(rng.integers(1, 24))
    edges = np.stack([np.arange(vertices - 1), np.arange(1, vertices)], axis=1)
    positions = rng.uniform(0, 5000, (vertices, 3)).astype("<f4").tobytes()
    radii = rng.uniform(1, 50, vertices).astype("<f4").tobytes()
    types = rng.integers(0, 5, vertices).astype("u1").tobytes() if vertex_types else b""
    header = struct.pack("<II", vertices, len(edges))
    return b"".join([header, positions, edges.astype("<u4").tobytes(), radii, types])


def write_skeletons(
    directory: pathlib.Path, ids: np.ndarray, seed: int = 2, vertex_types: bool = True
) -> None:
    """Skeletons with a radius and, if `vertex_types`, a uint8 attribute (which the
    Neuroglancer client does not finish loading: the browser tests leave it out)."""
    directory.mkdir(parents=True, exist_ok=True)
    attributes = SKELETON_ATTRIBUTES if vertex_types else SKELETON_ATTRIBUTES[:1]
    (directory / "info").write_text(
        json.dumps(
            {
                "@type": "neuroglancer_skeletons",
                "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
                "vertex_attributes": attributes,
            }
        )
    )
    rng = np.random.default_rng(seed)
    for segment in ids.tolist():
        (directory / str(segment)).write_bytes(skeleton_bytes(rng, vertex_types))


def legacy_fragment(vertices: np.ndarray, triangles: np.ndarray) -> bytes:
    return (
        struct.pack("<I", len(vertices))
        + vertices.astype("<f4").tobytes()
        + triangles.astype("<u4").tobytes()
    )


def write_legacy_meshes(
    directory: pathlib.Path, ids: np.ndarray, seed: int = 3
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """`<id>:0` + two fragment files per id; returns each mesh (vertices, triangles) merged."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "info").write_text(json.dumps({"@type": "neuroglancer_legacy_mesh"}))
    rng = np.random.default_rng(seed)
    meshes = {}
    for segment in ids.tolist():
        parts = []
        for k in range(2):
            vertices = rng.uniform(0, 4000, (4, 3)).astype(np.float32)
            (directory / f"{segment}:0:{k}").write_bytes(
                legacy_fragment(vertices, TETRAHEDRON_FACES)
            )
            parts.append(vertices)
        (directory / f"{segment}:0").write_text(
            json.dumps({"fragments": [f"{segment}:0:0", f"{segment}:0:1"]})
        )
        faces = np.concatenate([TETRAHEDRON_FACES, TETRAHEDRON_FACES + 4])
        meshes[segment] = (np.concatenate(parts), faces)
    return meshes


def write_segmentation(root: pathlib.Path, mesh: str | None, skeletons: str | None) -> np.ndarray:
    """A small unsharded precomputed segmentation at root whose info names the directories."""
    volume = np.random.default_rng(4).integers(0, 5, (24, 20, 12, 1)).astype(np.uint64)
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{root.absolute()}/",
            "multiscale_metadata": {
                "type": "segmentation",
                "data_type": "uint64",
                "num_channels": 1,
            },
            "scale_metadata": {
                "size": list(volume.shape[:3]),
                "resolution": [8, 8, 40],
                "chunk_size": [8, 8, 8],
                "encoding": "raw",
            },
            "create": True,
        }
    ).result()
    store[...] = volume
    info = json.loads((root / "info").read_text())
    if mesh:
        info["mesh"] = mesh
    if skeletons:
        info["skeletons"] = skeletons
    (root / "info").write_text(json.dumps(info))
    return volume
