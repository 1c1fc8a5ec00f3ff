"""TEASAR's invalidation in C: the voxels its rule clears (by hand, ties included) on blobs,
tubes and noise at the field's voxel sizes, kimimaro's where no two vertices tie, the same
skeletons from kimimaro's TEASAR run with each on the suite's cell bodies and neurites, and
kimimaro's own wherever a call asks for what the C one does not do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright.generation import invalidation
from shardwright.generation.tracing import Tracing
from tests.support import cells

kimimaro = pytest.importorskip("kimimaro")

VOXEL_SIZES = [(1.0, 1.0, 1.0), (8.0, 8.0, 40.0), (4.0, 4.0, 40.0), (16.0, 12.0, 30.0)]


def test_the_c_invalidation_is_built() -> None:
    """CI builds `_invalidation` (setup.py); without it TEASAR runs kimimaro's own, slower."""
    assert invalidation._invalidation is not None


def _flood(voxels: np.ndarray, distance: np.ndarray, scale: float, const: float,
           voxel: tuple[float, float, float], path: np.ndarray) -> np.ndarray:  # fmt: skip
    """The rule by hand, in float32 as the C one computes: nearest first, each voxel taken
    at its distance from the first vertex that reached it there, ties in the order reached;
    a voxel is reached within its vertex's ball through voxels of the segment."""
    import heapq

    left = voxels.copy(order="F").astype(bool)
    w = np.asarray(voxel, np.float32)
    radii = [np.float32(scale) * distance[tuple(p)] + np.float32(const) for p in path.tolist()]
    heap = [(np.float32(0), i, tuple(p), i) for i, p in enumerate(path.tolist())]
    heapq.heapify(heap)
    counter = len(heap)
    while heap:
        _, _, at, source = heapq.heappop(heap)
        if not left[at]:
            continue
        left[at] = False
        origin = path[source].astype(np.int64)
        for step in np.ndindex(3, 3, 3):  # neighbours in the C one's order: x fastest, z slowest
            near = tuple(int(a) + s - 1 for a, s in zip(at, step[::-1], strict=True))
            if near == at or not all(0 <= a < n for a, n in zip(near, left.shape, strict=True)):
                continue
            if left[near]:
                f = w * (np.asarray(near) - origin).astype(np.float32)
                dist = np.sqrt(f[0] * f[0] + f[1] * f[1] + f[2] * f[2])
                if dist < radii[source]:
                    heapq.heappush(heap, (dist, counter, near, source))
                    counter += 1
    return left


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["blob", "tube", "noise"]),
    size=st.tuples(st.integers(1, 24), st.integers(1, 20), st.integers(1, 12)),
    voxel=st.sampled_from(VOXEL_SIZES),
    scale=st.sampled_from([0.5, 1.0, 4.0, 10.0]),
    const=st.sampled_from([0.0, 10.0, 300.0]),
    sources=st.integers(1, 30),
    as_bool=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_voxels_the_rule_clears(
    kind: str,
    size: tuple[int, int, int],
    voxel: tuple[float, float, float],
    scale: float,
    const: float,
    sources: int,
    as_bool: bool,
    seed: int,
) -> None:
    """Any shape, voxel size and ball size; a path of voxels inside and outside the segment,
    some repeated: the voxels left are the rule's, the count cleared the difference; with one
    vertex (no tie between vertices) they are kimimaro's too."""
    rng = np.random.default_rng(seed)
    voxels = cells.one_segment(kind, size, rng)
    if not as_bool:
        voxels = voxels.view(np.uint8)
    distance = np.asfortranarray(rng.uniform(0, 40, size).astype(np.float32))
    path = np.stack([rng.integers(0, n, sources) for n in size], axis=1).astype(np.uint32)
    path = np.concatenate([path, path[: sources // 3]])
    ours = voxels.copy(order="F")
    cleared, left = invalidation.roll_invalidation(ours, distance, scale, const, voxel, path)
    assert left is ours
    np.testing.assert_array_equal(ours.astype(bool), _flood(voxels, distance, scale, const,
                                                            voxel, path))  # fmt: skip
    assert cleared == int(voxels.sum()) - int(ours.sum())
    one, theirs = voxels.copy(order="F"), voxels.copy(order="F")
    cleared, _ = invalidation.roll_invalidation(one, distance, scale, const, voxel, path[:1])
    expected, _ = invalidation.kimimaro_own()(theirs, distance, scale, const, voxel, path[:1])
    np.testing.assert_array_equal(one, theirs)
    assert cleared == expected


@pytest.mark.parametrize("volume", ["cell bodies", "neurites"])
def test_kimimaros_skeletons_are_the_same_with_it(
    monkeypatch: pytest.MonkeyPatch, volume: str
) -> None:
    """kimimaro's TEASAR over the test suite's cell bodies or neurites, once with its own
    invalidation and once with ours installed: every skeleton's cable within 0.5 % of the
    other's, and all but one (a tie between two vertices may differ) the same, vertex for
    vertex."""
    import kimimaro.skeletontricks as tricks

    make = cells.cell_bodies if volume == "cell bodies" else cells.neurites
    labels = np.asfortranarray(make((128, 128, 32), (8, 8, 40), 12, seed=2))
    settings_ = dict(
        teasar_params=Tracing().params(), anisotropy=(8, 8, 40), dust_threshold=0,
        fix_branching=True, fix_borders=True, progress=False, parallel=1,
    )  # fmt: skip
    monkeypatch.setattr(tricks, "roll_invalidation_ball_inside_component",
                        invalidation.kimimaro_own())  # fmt: skip
    theirs = kimimaro.skeletonize(labels, **settings_)
    invalidation.install()
    assert tricks.roll_invalidation_ball_inside_component is invalidation.roll_invalidation
    ours = kimimaro.skeletonize(labels, **settings_)
    segments = sorted(int(s) for s in np.unique(labels) if s)
    assert sorted(ours) == sorted(theirs) == segments and len(segments) >= 10
    same = 0
    for segment, skeleton in theirs.items():
        assert len(skeleton.edges) > 0
        assert ours[segment].cable_length() == pytest.approx(skeleton.cable_length(), rel=0.005)
        same += all(np.array_equal(getattr(ours[segment], field), getattr(skeleton, field))
                    for field in ("vertices", "edges", "radii"))  # fmt: skip
    assert same >= len(segments) - 1


def test_install_is_once_and_keeps_kimimaros_own() -> None:
    import kimimaro.skeletontricks as tricks

    invalidation.install()
    invalidation.install()
    assert tricks.roll_invalidation_ball_inside_component is invalidation.roll_invalidation
    assert invalidation.kimimaro_own() is not invalidation.roll_invalidation
    assert invalidation.kimimaro_own().__module__ != invalidation.__name__


@pytest.mark.parametrize("asks", ["a voxel graph", "6-connected", "C order", "too many voxels"])
def test_kimimaros_own_runs_where_the_c_one_does_not_apply(
    monkeypatch: pytest.MonkeyPatch, asks: str
) -> None:
    """A voxel connectivity graph, another connectivity, a field not in Fortran order or over
    the voxels whose pushes 32 bits count go to kimimaro's own, with their arguments, and
    come back as it returns them."""
    voxels = cells.one_segment("blob", (12, 10, 6), np.random.default_rng(3)).view(np.uint8)
    distance = np.asfortranarray(np.full(voxels.shape, 2.0, np.float32))
    own = invalidation.kimimaro_own()
    calls: list[dict[str, object]] = []

    def recorded(*args: object, **kwargs: object) -> tuple[int, np.ndarray]:
        calls.append(kwargs)
        return own(*args, **kwargs)

    monkeypatch.setattr(invalidation, "_kimimaro_own", recorded)
    graph = None
    connectivity = 26
    if asks == "a voxel graph":
        graph = np.asfortranarray(np.full(voxels.shape, 0x3FFFFFF, np.uint32))
    elif asks == "6-connected":
        connectivity = 6
    elif asks == "too many voxels":
        monkeypatch.setattr(invalidation, "MOST_VOXELS", voxels.size - 1)
    else:
        voxels = np.ascontiguousarray(voxels)
    path = [(6, 5, 3)]
    expected = own(voxels.copy(order="K"), distance, 1.0, 3.0, (1, 1, 1), path,
                   voxel_connectivity_graph=graph, connectivity=connectivity)  # fmt: skip
    cleared, left = invalidation.roll_invalidation(
        voxels, distance, 1.0, 3.0, (1, 1, 1), path,
        voxel_connectivity_graph=graph, connectivity=connectivity,
    )  # fmt: skip
    assert calls == [{"voxel_connectivity_graph": graph, "connectivity": connectivity}]
    assert cleared == expected[0]
    assert cleared > 1 or asks == "C order"  # kimimaro reads any buffer as Fortran-ordered
    np.testing.assert_array_equal(left, expected[1])


def test_a_source_outside_the_field_is_refused_any_radius_is_safe() -> None:
    from shardwright.generation import _invalidation

    field = np.asfortranarray(np.ones((4, 4, 4), np.uint8))
    radii = np.ones(1, np.float32)
    for source in ([4, 0, 0], [0, -1, 0]):
        with pytest.raises(ValueError, match="inside it"):
            _invalidation.roll(field, np.array([source], np.int64), radii, (1.0, 1.0, 1.0))
    assert field.all()
    with pytest.raises(ValueError, match="Fortran-ordered uint8"):
        _invalidation.roll(field, np.zeros((1, 3), np.int64), np.ones(2, np.float32), (1, 1, 1))
    for radius in (-50.0, np.nan, np.inf):  # its source alone; the whole segment
        cleared = _invalidation.roll(field, np.array([[1, 2, 3]], np.int64),
                                     np.array([radius], np.float32), (1.0, 1.0, 1.0))  # fmt: skip
        assert cleared == (64 if radius == np.inf else 1) and not field[1, 2, 3]
        field[:] = 1
    huge = np.zeros((1000, 1000, 160), np.uint8, order="F")  # untouched pages: no memory
    assert huge.size > invalidation.MOST_VOXELS
    with pytest.raises(ValueError, match="159 million"):
        _invalidation.roll(huge, np.zeros((1, 3), np.int64), radii, (1.0, 1.0, 1.0))
