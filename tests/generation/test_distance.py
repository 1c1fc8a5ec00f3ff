"""TEASAR's distance field in C against dijkstra3d's: the same field bit for bit and the same
farthest voxel (which among equally far ones dijkstra3d's heap order decides) on blobs,
tubes, noise and boxes at the field's voxel sizes, with and without the free-space start;
kimimaro's skeletons the same with it; dijkstra3d's own wherever a call asks for what the C
one does not do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright.generation import distance
from shardwright.generation.tracing import Tracing
from tests.support import cells

dijkstra3d = pytest.importorskip("dijkstra3d")
kimimaro = pytest.importorskip("kimimaro")

VOXEL_SIZES = [(1.0, 1.0, 1.0), (8.0, 8.0, 40.0), (4.0, 4.0, 40.0), (16.0, 12.0, 30.0)]


def test_the_c_distance_field_is_built() -> None:
    """CI builds `_distance` (setup.py); without it TEASAR runs dijkstra3d's, slower."""
    assert distance._distance is not None


def _both(field: np.ndarray, source: tuple[int, ...], voxel: tuple[float, float, float],
          free: float) -> tuple[tuple[np.ndarray, tuple], tuple[np.ndarray, tuple]]:  # fmt: skip
    kwargs = dict(anisotropy=voxel, free_space_radius=free, return_max_location=True)
    theirs = dijkstra3d.euclidean_distance_field(field, source, **kwargs)
    ours = distance.euclidean_distance_field(field, source, **kwargs)
    return ours, theirs


def _assert_same(ours: tuple[np.ndarray, tuple], theirs: tuple[np.ndarray, tuple]) -> None:
    assert ours[0].dtype == theirs[0].dtype == np.float32 and ours[0].flags.f_contiguous
    assert ours[0].tobytes(order="F") == theirs[0].tobytes(order="F")
    assert tuple(int(c) for c in ours[1]) == tuple(int(c) for c in theirs[1])


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["blob", "tube", "noise", "box"]),
    size=st.tuples(st.integers(1, 24), st.integers(1, 20), st.integers(1, 14)),
    voxel=st.sampled_from(VOXEL_SIZES),
    free=st.sampled_from([0.0, 0.5, 30.0, 90.0, 400.0]),
    dtype=st.sampled_from([np.bool_, np.uint8, np.int8]),
    fortran=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_same_field_and_farthest_voxel_as_dijkstra3d(
    kind: str,
    size: tuple[int, int, int],
    voxel: tuple[float, float, float],
    free: float,
    dtype: type,
    fortran: bool,
    seed: int,
) -> None:
    """Any shape, voxel size, free-space radius (kimimaro's soma start), element type and
    order, from any voxel of the segment: the field's bytes and the farthest voxel are
    dijkstra3d's."""
    rng = np.random.default_rng(seed)
    field = cells.one_segment(kind, size, rng).astype(dtype)
    if dtype is np.int8:
        field = field * np.int8(-3)  # any nonzero byte is inside
    field = np.asfortranarray(field) if fortran else np.ascontiguousarray(field)
    inside = np.argwhere(field)
    if not len(inside):
        return
    source = tuple(int(c) for c in inside[rng.integers(len(inside))])
    _assert_same(*_both(field, source, voxel, free))


@pytest.mark.parametrize("voxel", VOXEL_SIZES)
@pytest.mark.parametrize("free", [0.0, 3.0])
def test_among_equally_far_voxels_the_same_one_is_farthest(
    voxel: tuple[float, float, float], free: float
) -> None:
    """From a box's centre its eight corners are equally far: which one is the root is
    decided by the heap's order, and it is dijkstra3d's."""
    field = np.ones((9, 11, 7), bool, order="F")
    ours, theirs = _both(field, (4, 5, 3), voxel, free)
    _assert_same(ours, theirs)
    assert int((ours[0] == ours[0].max()).sum()) >= 8


@pytest.mark.parametrize("volume", ["cell bodies", "neurites"])
def test_kimimaros_skeletons_are_the_same_with_it(
    monkeypatch: pytest.MonkeyPatch, volume: str
) -> None:
    """kimimaro's TEASAR over the test suite's cell bodies (somata: the free-space start) or
    neurites, once with dijkstra3d's field and once with ours: every skeleton the same,
    vertex for vertex."""
    import kimimaro.trace

    make = cells.cell_bodies if volume == "cell bodies" else cells.neurites
    labels = np.asfortranarray(make((128, 128, 32), (8, 8, 40), 12, seed=4))
    params = Tracing().params()
    if volume == "cell bodies":  # somata at this size: the free-space start from each root
        params |= {"soma_detection_threshold": 150.0, "soma_acceptance_threshold": 250.0}
    settings_ = dict(
        teasar_params=params, anisotropy=(8, 8, 40), dust_threshold=0,
        fix_branching=True, fix_borders=True, progress=False, parallel=1,
    )  # fmt: skip
    monkeypatch.setattr(kimimaro.trace, "dijkstra3d", dijkstra3d)
    theirs = kimimaro.skeletonize(labels, **settings_)
    calls: list[float] = []
    ours_field = distance.euclidean_distance_field

    def recorded(*args: object, **kwargs: object) -> object:
        calls.append(float(kwargs.get("free_space_radius", 0)))  # type: ignore[arg-type]
        return ours_field(*args, **kwargs)

    monkeypatch.setattr(distance, "euclidean_distance_field", recorded)
    distance.install()  # a new stand-in for dijkstra3d (the real one was put back above)
    ours = kimimaro.skeletonize(labels, **settings_)
    segments = sorted(int(s) for s in np.unique(labels) if s)
    assert sorted(ours) == sorted(theirs) == segments and len(segments) >= 10
    assert len(calls) >= len(segments)  # at least the root's field for each
    assert (max(calls) > 0) == (volume == "cell bodies")  # somata started in free space
    assert sum(len(skeleton.edges) > 0 for skeleton in theirs.values()) >= len(segments) // 2
    for segment, skeleton in theirs.items():
        for field in ("vertices", "edges", "radii"):
            np.testing.assert_array_equal(getattr(ours[segment], field), getattr(skeleton, field))


def test_install_is_once_and_leaves_dijkstra3d_alone() -> None:
    """kimimaro's tracing module sees our field and dijkstra3d's other functions; dijkstra3d
    itself, and everyone else using it, keeps its own."""
    import kimimaro.trace

    distance.install()
    seen = kimimaro.trace.dijkstra3d
    distance.install()
    assert kimimaro.trace.dijkstra3d is seen
    assert seen.euclidean_distance_field is distance.euclidean_distance_field
    assert seen.dijkstra is dijkstra3d.dijkstra and seen.railroad is dijkstra3d.railroad
    assert dijkstra3d.euclidean_distance_field.__module__ != distance.__name__


@pytest.mark.parametrize(
    "asks",
    ["a voxel graph", "a feature map", "two sources", "2-D", "a background source",
     "a float source", "an infinite free space", "too many voxels"],
)  # fmt: skip
def test_dijkstra3ds_own_runs_where_the_c_one_does_not_apply(
    monkeypatch: pytest.MonkeyPatch, asks: str
) -> None:
    """Each call the C one does not do goes to dijkstra3d's with its arguments, and comes
    back as dijkstra3d returns it."""
    field = cells.one_segment("blob", (12, 10, 6), np.random.default_rng(3))
    source: object = (6, 5, 3)
    kwargs: dict[str, object] = {"anisotropy": (8, 8, 40), "return_max_location": True}
    if asks == "a voxel graph":
        kwargs["voxel_graph"] = np.asfortranarray(np.full(field.shape, 0x3FFFFFF, np.uint32))
    elif asks == "a feature map":
        kwargs["return_feature_map"] = True
    elif asks == "two sources":
        source = [(6, 5, 3), (5, 5, 3)]
    elif asks == "2-D":
        field, source = field[:, :, 3], (6, 5)
    elif asks == "a background source":
        source = (0, 0, 0)
        assert not field[source]
    elif asks == "a float source":
        source = (6.0, 5.0, 3.0)
    elif asks == "an infinite free space":
        kwargs["free_space_radius"] = np.inf
        kwargs["return_max_location"] = False
    else:
        monkeypatch.setattr(distance, "MOST_VOXELS", field.size - 1)
    own = dijkstra3d.euclidean_distance_field
    calls: list[object] = []
    monkeypatch.setattr(dijkstra3d, "euclidean_distance_field",
                        lambda *a, **k: calls.append(a[1]) or own(*a, **k))  # fmt: skip
    ours = distance.euclidean_distance_field(field, source, **kwargs)
    assert calls == [source]
    expected = own(field, source, **kwargs)
    for got, want in zip(ours if isinstance(ours, tuple) else [ours],
                         expected if isinstance(expected, tuple) else [expected],
                         strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_the_c_one_refuses_what_it_cannot_search() -> None:
    """Called directly: a source outside the field or on its background, voxel sizes not
    positive, a field or dist of another shape or order, are one clear error each, and the
    field is not changed."""
    from shardwright.generation import _distance

    field = np.asfortranarray(np.ones((4, 5, 3), np.uint8))
    field[0, 0, 0] = 0
    dist = np.empty(field.shape, np.float32, order="F")
    for source, voxel in [((4, 0, 0), (1.0, 1.0, 1.0)), ((0, -1, 0), (1.0, 1.0, 1.0)),
                          ((0, 0, 0), (1.0, 1.0, 1.0)), ((1, 1, 1), (0.0, 1.0, 1.0))]:  # fmt: skip
        with pytest.raises(ValueError, match="source on one of its nonzero voxels"):
            _distance.distance_field(field, source, voxel, 0.0, dist)
    with pytest.raises(ValueError, match="of the field's shape"):
        smaller = np.empty((4, 4, 3), np.float32, order="F")
        _distance.distance_field(field, (1, 1, 1), (1.0, 1.0, 1.0), 0.0, smaller)
    with pytest.raises(ValueError, match="finite free-space radius"):
        _distance.distance_field(field, (1, 1, 1), (1.0, 1.0, 1.0), float("nan"), dist)
    with pytest.raises(ValueError, match="not Fortran contiguous"):
        _distance.distance_field(np.ascontiguousarray(field), (1, 1, 1), (1, 1, 1), 0.0, dist)
    assert int(field.sum()) == field.size - 1
    farthest = _distance.distance_field(field, (1, 1, 1), (1.0, 1.0, 1.0), 0.0, dist)
    theirs, at = dijkstra3d.euclidean_distance_field(field, (1, 1, 1), return_max_location=True)
    assert dist.tobytes() == theirs.tobytes() and np.isinf(dist[0, 0, 0])
    assert np.unravel_index(farthest, field.shape, order="F") == at
