"""Surfaces: a block's marching cubes (zmesh) and one segment's levels of detail.

Level of detail 0 is each block's surface simplified (meshoptimizer's quadric edge collapse)
within the plan's error in nm, its open border locked where it is: the block was read with
one voxel more on its high sides, so neighbouring blocks' borders are the same polyline on
their shared plane and the surface has no cracks. Each coarser level decimates the segment's
whole surface of the level below (welded: the seams are interior) to about a quarter of its
triangles, then cuts it on the grid of the level's 2 x 2 x 2 children, so no triangle crosses
that grid (as the format requires) and neighbouring fragments share the cut exactly.

A bound never deletes an object: a surface that simplifying would leave without triangles, or
with less than KEPT_AREA of its area (a tiny or thin object, within the bound of being flat;
a block's surface of a large one keeps 0.98 or more), keeps its unsimplified surface (as
Igneous's meshes keep every object), and a coarser level that would have no triangles keeps
the finer level's surface.

meshoptimizer rather than zmesh's own simplifiers: it is about seven times faster than
zmesh's error-bounded one and, given half the bound (ERROR_SHARE), leaves fewer triangles
closer to the unsimplified surface than that one given all of it; it collapses edges
onto existing vertices (no vertex leaves the surface's box, none becomes NaN), and it returns
on every surface (zmesh's error-bounded simplifier never returns on some it simplified once).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from shardwright.formats.precomputed.meshes import MultiLodManifest, draco_fragment, zorder
from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid, three
from shardwright.generation.welding import unique_positions

QUANTIZATION_BITS = 16
FACES_PER_LEVEL = 4  # each coarser level keeps about a quarter of the triangles
MIN_FACES = 16  # below this a level keeps the mesh as it is
# meshoptimizer's error is how far a kept vertex lies from the planes of the triangles it
# replaced; the corners it cuts off lie farther. Given half the bound, it keeps fewer
# triangles than zmesh's simplifier given all of it, closer to the unsimplified surface
# (a 128^3 block of bench_meshes' volume at 8 nm: 296 k triangles vs 445 k; area 0.978-1.013
# of the unsimplified surface, median 0.996, vs 0.964-1.007, median 0.983).
ERROR_SHARE = 0.5
KEPT_AREA = 0.9  # a simplified surface with less of its area keeps the unsimplified one

Mesh = tuple[np.ndarray, np.ndarray]  # vertices [n, 3] float32 nm, faces [m, 3] uint32


def block_surfaces(
    labels: np.ndarray,
    grid: BlockGrid,
    max_error: float,
    wanted: Iterable[int],
    closed: tuple[tuple[bool, bool, bool], tuple[bool, bool, bool]] = ((False,) * 3,) * 2,
) -> dict[int, Mesh]:
    """Each wanted segment's surface in one block (labels [x, y, z], read with the block's
    overlap), vertices in nm from the block's origin, simplified within `max_error`.
    `closed`: (low, high) sides per axis where the block meets the dataset's edge: surfaces
    are closed there (a zero layer beyond the data), as Igneous closes dataset edges; the
    caps on a low edge lie half a voxel below the grid and are held on the fragment's border."""
    import zmesh

    low, high = closed
    padded = np.pad(labels, [(int(a), int(b)) for a, b in zip(low, high, strict=True)])
    mesher = zmesh.Mesher(grid.resolution)
    mesher.mesh(np.asfortranarray(padded), close=False)
    resolution = np.asarray(grid.resolution, np.float32)
    # zmesh's voxel centre is (i + .5) r of the padded array; block-local positions start
    # at the centre of the block's first voxel.
    shift = resolution / 2 + np.asarray(low, np.float32) * resolution
    out: dict[int, Mesh] = {}
    for segment in sorted(set(mesher.ids()) & set(wanted)):
        mesh = mesher.get(segment, normals=False, reduction_factor=0, max_error=0,
                          voxel_centered=True)  # fmt: skip
        mesher.erase(segment)
        if len(mesh.faces):
            vertices = np.asarray(mesh.vertices, np.float32) - shift
            faces = np.asarray(mesh.faces, np.uint32)
            if max_error > 0:
                vertices, faces = _simplified_or_whole((vertices, faces), max_error)
            out[int(segment)] = (vertices, faces)
    mesher.clear()
    return out


def _simplified_or_whole(mesh: Mesh, max_error: float) -> Mesh:
    """The block surface simplified within `max_error`, unless that leaves it without triangles
    or with less than KEPT_AREA of its area: then as it is."""
    simple = simplified(mesh, 0, max_error * ERROR_SHARE, lock_border=True)
    return simple if area(*simple) >= KEPT_AREA * area(*mesh) > 0 else mesh


def area(vertices: np.ndarray, faces: np.ndarray) -> float:
    """The surface's area (nm^2; float32 sums, near enough to compare surfaces)."""
    return float(np.sqrt(_doubled_squared_areas(vertices, faces, np.float32)).sum() / 2)


def _doubled_squared_areas(
    vertices: np.ndarray, faces: np.ndarray, dtype: type = np.float64
) -> np.ndarray:
    """Each triangle's (2 x area)^2."""
    corners: np.ndarray = np.asarray(vertices, dtype)[np.asarray(faces, np.intp)]
    doubled = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return np.einsum("ij,ij->i", doubled, doubled)


def weld(vertices: np.ndarray, faces: np.ndarray) -> Mesh:
    """One vertex per position (parts laid side by side share their border vertices exactly),
    without triangles of no area (collapsing edges and cutting on a grid can leave slivers)."""
    unique, inverse = unique_positions(np.asarray(vertices, np.float32))
    faces = inverse[faces.astype(np.int64)].astype(np.uint32)
    keep = _doubled_squared_areas(unique, faces) > 0
    return unique.astype(np.float32), faces[keep]


def lod_count(positions: np.ndarray) -> int:
    """Levels until one fragment covers every finest fragment of a segment."""
    spread = np.bitwise_xor(positions.min(axis=0), positions.max(axis=0))
    return 1 + max(int(v).bit_length() for v in spread.tolist())


def multires_mesh(
    pieces: Sequence[Piece], grid: BlockGrid, max_error: float, lods: int | None
) -> tuple[bytes, bytes]:
    """One segment's (manifest, fragment data) from its pieces: `lods` levels of detail
    (None: `lod_count`)."""
    size = np.asarray(grid.block_nm, np.float64)
    fragments = {piece.block: (piece.vertices, piece.links) for piece in pieces}
    positions = np.array(sorted(fragments), np.int64).reshape(-1, 3)
    count = lods if lods is not None else lod_count(positions)
    whole = weld(*_joined(
        [((v + np.asarray(p) * size).astype(np.float32), f)
         for p, (v, f) in sorted(fragments.items())]
    ))  # fmt: skip
    # A cap on the dataset's low edge lies half a voxel below the grid (level 0's fragments
    # hold it on their border, as quantization does): so do the coarser levels.
    whole = (np.maximum(whole[0], np.float32(0)), whole[1])
    levels = [fragments]
    for lod in range(1, count):
        coarser = weld(*_decimated(whole))
        level = _cut(coarser, size * 2 ** (lod - 1))
        if any(len(faces) for _, faces in level.values()):
            whole = coarser
        else:  # decimated to nothing: the finer level's surface, cut on this level's grid
            level = _cut(whole, size * 2 ** (lod - 1))
        levels.append(level)
    scale = max(max_error, min(grid.resolution))
    return _encode(levels, grid, size, scale)


def _decimated(mesh: Mesh) -> Mesh:
    """A quarter of the triangles (one level coarser), by quadric decimation."""
    target = len(mesh[1]) // FACES_PER_LEVEL
    if target < MIN_FACES:
        return mesh
    return simplified(mesh, target, math.inf, lock_border=False)


def simplified(mesh: Mesh, target_faces: int, max_error: float, lock_border: bool) -> Mesh:
    """The mesh with edges collapsed until `target_faces` remain or the next collapse would
    move the surface more than `max_error` nm; only the vertices still used are kept."""
    import meshoptimizer

    vertices = np.ascontiguousarray(mesh[0], np.float32)
    indices = np.ascontiguousarray(mesh[1], np.uint32).reshape(-1)
    options = meshoptimizer.SIMPLIFY_ERROR_ABSOLUTE
    if lock_border:
        options |= meshoptimizer.SIMPLIFY_LOCK_BORDER
    out = np.empty_like(indices)
    count = meshoptimizer.simplify(
        out, indices, vertices, len(indices), len(vertices), vertices.strides[0],
        target_faces * 3, min(float(max_error), float(np.finfo(np.float32).max)), options,
    )  # fmt: skip
    used, faces = np.unique(out[:count], return_inverse=True)
    return vertices[used], faces.reshape(-1, 3).astype(np.uint32)


def _cut(mesh: Mesh, child_size: np.ndarray) -> dict[tuple[int, int, int], Mesh]:
    """The level's fragments: the whole mesh cut on the grid of their children (so no
    triangle crosses it) and grouped eight children to a fragment, vertices from the
    fragment's corner."""
    import zmesh

    cells = zmesh.chunk_mesh(zmesh.Mesh(*mesh, None), tuple(child_size.tolist()), (0.0, 0.0, 0.0))
    parts: dict[tuple[int, int, int], list[Mesh]] = defaultdict(list)
    for cell, piece in sorted(cells.items()):
        if not len(piece.faces) or min(cell) < 0:
            continue
        parent = (cell[0] >> 1, cell[1] >> 1, cell[2] >> 1)
        corner = np.asarray(parent, np.float64) * child_size * 2
        vertices = np.clip(np.asarray(piece.vertices, np.float64) - corner, 0, child_size * 2)
        parts[parent].append((vertices.astype(np.float32), np.asarray(piece.faces, np.uint32)))
    return {parent: _joined(meshes) for parent, meshes in parts.items()}


def _joined(meshes: Sequence[Mesh]) -> Mesh:
    base, vertices, faces = 0, [], []
    for v, f in meshes:
        vertices.append(v)
        faces.append(f.astype(np.uint32) + np.uint32(base))
        base += len(v)
    return np.concatenate(vertices), np.concatenate(faces)


def _encode(
    levels: list[dict[tuple[int, int, int], Mesh]],
    grid: BlockGrid,
    size: np.ndarray,
    scale: float,
) -> tuple[bytes, bytes]:
    top = (1 << QUANTIZATION_BITS) - 1
    data: list[bytes] = []
    positions, sizes = [], []
    for lod, fragments in enumerate(levels):
        keys = np.array(sorted(fragments), np.uint32).reshape(-1, 3)
        keys = keys[zorder(keys)]
        box = size * 2**lod
        lod_sizes = []
        for key in keys.tolist():
            vertices, faces = fragments[tuple(key)]
            quantized = np.rint(vertices / box * top).clip(0, top).astype(np.float32)
            blob = draco_fragment(quantized, faces, QUANTIZATION_BITS)
            data.append(blob)
            lod_sizes.append(len(blob))
        positions.append(keys.T.copy())
        sizes.append(np.asarray(lod_sizes, np.uint32))
    manifest = MultiLodManifest(
        chunk_shape=three(float(v) for v in size),
        grid_origin=grid.origin_nm,
        lod_scales=tuple(scale * 2**lod for lod in range(len(levels))),
        vertex_offsets=np.zeros((len(levels), 3), np.float32),
        fragment_positions=tuple(positions),
        fragment_sizes=tuple(sizes),
    )
    return manifest.to_bytes(), b"".join(data)
