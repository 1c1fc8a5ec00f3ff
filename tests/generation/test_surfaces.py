"""Surface helpers: areas of triangles computed by hand, welding against NumPy's unique rows
with only triangles of no area dropped, levels of detail against a brute-force count, and
simplification that keeps a flat surface's area and its locked border."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardwright.generation import surfaces
from shardwright.generation.grid import BlockGrid
from shardwright.generation.surfaces import area, lod_count, simplified, weld


def test_areas_by_hand() -> None:
    right = np.array([[0, 0, 0], [3, 0, 0], [0, 4, 0]], np.float32)
    assert area(right, np.array([[0, 1, 2]])) == 6.0
    square = np.array([[0, 0, 5], [1, 0, 5], [1, 1, 5], [0, 1, 5]], np.float32)
    assert area(square, np.array([[0, 1, 2], [0, 2, 3]])) == 1.0
    line = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2]], np.float32)
    assert area(line, np.array([[0, 1, 2]])) == 0.0


@given(
    vertices=hnp.arrays(np.float32, st.tuples(st.integers(3, 12), st.just(3)),
                        elements=st.sampled_from([0.0, 1.0, 2.0, -0.0])),
    data=st.data(),
)  # fmt: skip
def test_welding_keeps_one_vertex_per_position_and_every_triangle_with_area(
    vertices: np.ndarray, data: st.DataObject
) -> None:
    n = len(vertices)
    faces = np.array(data.draw(st.lists(st.tuples(*[st.integers(0, n - 1)] * 3), max_size=10)),
                     np.uint32).reshape(-1, 3)  # fmt: skip
    unique, kept = weld(vertices, faces)
    assert len(unique) == len(np.unique(vertices + 0.0, axis=0))
    corners = vertices[faces.astype(np.intp)].astype(np.float64)
    with_area = [
        f for f, c in zip(faces.tolist(), corners, strict=True)
        if np.any(np.cross(c[1] - c[0], c[2] - c[0]))
    ]  # fmt: skip
    assert len(kept) == len(with_area)
    np.testing.assert_array_equal(
        unique[kept.astype(np.intp)], vertices[np.array(with_area, np.intp).reshape(-1, 3)]
    )  # noqa: E501


@given(positions=hnp.arrays(np.int64, st.tuples(st.integers(1, 6), st.just(3)),
                            elements=st.integers(0, 300)))  # fmt: skip
def test_levels_of_detail_end_where_one_fragment_covers_them_all(positions: np.ndarray) -> None:
    lods = lod_count(positions)
    rows = positions.tolist()
    one = next(k for k in range(1, 64) if len({tuple(v >> (k - 1) for v in p) for p in rows}) == 1)
    assert lods == one


def _flat_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A unit square at z = 0 made of n x n cells, two triangles each."""
    xs, ys = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1), indexing="ij")
    vertices = np.stack([xs.ravel(), ys.ravel(), np.zeros(xs.size)], 1).astype(np.float32)
    faces = []
    for i in range(n):
        for j in range(n):
            a, b, c, d = (
                i * (n + 1) + j,
                (i + 1) * (n + 1) + j,
                (i + 1) * (n + 1) + j + 1,
                i * (n + 1) + j + 1,
            )  # noqa: E501
            faces += [(a, b, c), (a, c, d)]
    return vertices, np.array(faces, np.uint32)


def test_simplifying_a_flat_surface_keeps_its_area_and_locked_border() -> None:
    vertices, faces = _flat_grid(6)
    less, fewer = simplified((vertices, faces), 0, 1e-4, lock_border=True)
    assert len(fewer) < len(faces)
    assert np.isclose(area(less, fewer), 1.0, atol=1e-5)
    on_border = {tuple(v) for v in vertices.tolist() if min(v[:2]) == 0 or max(v[:2]) == 1}
    assert on_border <= {tuple(v) for v in less.tolist()}  # the border stays where it is
    original = {tuple(v) for v in vertices.tolist()}
    assert {tuple(v) for v in less.tolist()} <= original  # no vertex leaves the surface
    whole = surfaces._simplified_or_whole((vertices, faces), 1e-4 / surfaces.ERROR_SHARE)
    assert len(whole[1]) == len(fewer)


def test_a_blocks_surfaces_are_its_wanted_segments_within_its_bounds() -> None:
    labels = np.zeros((8, 8, 8), np.uint32)
    labels[1:5, 1:5, 1:5] = 7
    labels[5:8, 0:3, 0:3] = 9
    grid = BlockGrid((8, 8, 8), (8, 8, 8), (2.0, 2.0, 2.0), (1, 1, 1), (1.0, 1.0, 1.0))
    closed = ((True,) * 3, (True,) * 3)  # the block is the whole dataset
    meshes = surfaces.block_surfaces(labels, grid, 0.0, [7, 9, 11], closed)
    assert sorted(meshes) == [7, 9]
    vertices, faces = meshes[7]
    assert faces.dtype == np.uint32 and len(faces)
    # The cube's faces lie half a voxel outside its voxel centres: [0.5, 4.5] voxels... about.
    assert vertices.min() >= 2.0 * 0.5 - 2.0 - 1e-3 and vertices.max() <= 2.0 * 4.5 + 1e-3
    assert 0.8 * 6 * 8**2 <= area(vertices, faces) <= 6 * 8**2 * 1.01  # ~ a 4-voxel cube's faces
