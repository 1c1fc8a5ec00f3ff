"""Pyramid geometry: level counts and sizes, resolutions, offsets, keys, block alignment and
the boxes one level's voxels make in the next, each against a brute-force reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.common import downsample
from shardwright.common.boxes import intersect
from shardwright.errors import PlanError, PyramidError
from shardwright.options import ConvertOptions
from shardwright.planning import pyramid
from shardwright.planning.pyramid import Box, Pyramid

Triple = tuple[int, int, int]
sizes = st.tuples(*[st.integers(1, 300)] * 3)
factors = st.sampled_from([(2, 2, 2), (2, 2, 1), (1, 2, 2), (3, 3, 1), (4, 1, 1), (1, 1, 5)])


def _level_sizes(size: Triple, factor: Triple, mips: int | str, chunk: Triple) -> list[Triple]:
    """The levels' sizes with one factor for every level."""
    return pyramid.level_steps(size, (1.0, 1.0, 1.0), lambda *_: factor, mips, chunk)[1]


def _levels_reference(size: Triple, factor: Triple) -> list[Triple]:
    """Every level until the downsampled axes are one voxel (ceil division each time)."""
    out = [size]
    while any(out[-1][d] > 1 for d in range(3) if factor[d] > 1):
        out.append(tuple(math.ceil(s / f) for s, f in zip(out[-1], factor, strict=True)))  # type: ignore[arg-type]
    return out


@given(size=sizes, factor=factors, chunk=st.tuples(*[st.integers(1, 64)] * 3), data=st.data())
def test_level_sizes_reduce_by_ceil_division_and_auto_stops_at_one_chunk(
    size: Triple, factor: Triple, chunk: Triple, data: st.DataObject
) -> None:
    every = _levels_reference(size, factor)
    most = len(every) - 1
    if most == 0:
        with pytest.raises(PyramidError, match="nothing to downsample"):
            _level_sizes(size, factor, 1, chunk)
        with pytest.raises(PyramidError, match="nothing to downsample"):
            _level_sizes(size, factor, "auto", chunk)
    else:
        _check_levels(size, factor, chunk, every, data.draw(st.integers(0, most)))


def _check_levels(
    size: Triple, factor: Triple, chunk: Triple, every: list[Triple], mips: int
) -> None:
    most = len(every) - 1
    assert _level_sizes(size, factor, mips, chunk) == every[: mips + 1]
    with pytest.raises(PyramidError, match=f"mips={most + 1} is too many"):
        _level_sizes(size, factor, most + 1, chunk)
    reducible = [d for d in range(3) if factor[d] > 1]
    fits = [k for k in range(1, most + 1) if all(every[k][d] <= chunk[d] for d in reducible)]
    auto = min([most, *fits])
    assert _level_sizes(size, factor, "auto", chunk) == every[: auto + 1]


def test_too_many_levels_names_how_many_there_can_be() -> None:
    with pytest.raises(PyramidError) as refused:
        _level_sizes((8, 8, 1), (2, 2, 2), 5, (4, 4, 1))
    assert "mips=5 is too many for a 8 x 8 x 1 volume" in str(refused.value)
    assert "use mips=3 or fewer (or auto)" in str(refused.value)


def test_resolutions_offsets_and_keys_of_a_level() -> None:
    assert pyramid.level_resolution((4, 4, 40), [(2, 2, 1)] * 3, 3) == (32, 32, 40)
    assert pyramid.level_resolution((4, 4, 40), [(2, 2, 1), (2, 2, 1), (2, 2, 2)], 3) == (
        32, 32, 80)  # fmt: skip
    assert pyramid.level_resolution((4.5, 4, 40), [(2, 2, 2)], 0) == (4.5, 4, 40)
    assert pyramid.level_offset((-3, 5, 7), [(2, 2, 2)], 1) == (-2, 2, 3)  # toward -infinity
    assert pyramid.level_offset((-3, 5, 7), [(2, 2, 1), (1, 1, 2)], 2) == (-2, 2, 3)
    assert pyramid.scale_of([(2, 2, 1), (2, 2, 1), (2, 2, 2)], 3) == (8, 8, 2)
    assert pyramid.scale_key((8, 8, 40.0)) == "8_8_40"
    assert pyramid.scale_key((4.5, 4, 40)) == "4.5_4_40"


@given(
    offset=st.tuples(*[st.integers(-(10**6), 10**6)] * 3),
    factor=factors,
    level=st.integers(0, 6),
)
def test_a_levels_offset_is_the_base_offset_floor_divided_by_its_factor(
    offset: Triple, factor: Triple, level: int
) -> None:
    want = tuple(math.floor(o / f**level) for o, f in zip(offset, factor, strict=True))
    assert pyramid.level_offset(offset, [factor] * level, level) == want


@given(chunk=st.tuples(*[st.integers(1, 100)] * 3), factor=st.tuples(*[st.integers(1, 9)] * 3))
def test_the_alignment_step_is_the_fewest_chunks_of_whole_blocks(
    chunk: Triple, factor: Triple
) -> None:
    step = pyramid.alignment_step(chunk, factor)
    for s, c, f in zip(step, chunk, factor, strict=True):
        assert s == next(n for n in range(1, f + 1) if n * c % f == 0)


def test_a_box_is_aligned_on_whole_steps_or_where_it_spans_the_axis() -> None:
    assert pyramid.box_aligned((4, 2, 1), (10, 10, 10), (2, 2, 1))
    assert not pyramid.box_aligned((3, 2, 1), (10, 10, 10), (2, 2, 1))
    assert pyramid.box_aligned((3, 2, 1), (3, 10, 10), (2, 2, 1))  # spans x
    refusal = r"pyramid level 2: shards of 3 x 2 x 1 chunks would split .*multiples of 2 x 2 x 1"
    with pytest.raises(PlanError, match=refusal):
        pyramid.check_aligned(2, (3, 2, 1), (10, 10, 10), (2, 2, 1))
    pyramid.check_aligned(0, (3, 2, 1), (3, 10, 10), (2, 2, 1))


# -- boxes ----------------------------------------------------------------------------------------
@st.composite
def boxes(draw: st.DrawFn, limit: int = 40) -> Box:
    start = draw(st.tuples(*[st.integers(0, limit - 1)] * 3))
    stop = tuple(draw(st.integers(a + 1, limit)) for a in start)
    return start, stop  # type: ignore[return-value]


def _voxels(box: Box) -> set[Triple]:
    (x0, y0, z0), (x1, y1, z1) = box
    return {(x, y, z) for x in range(x0, x1) for y in range(y0, y1) for z in range(z0, z1)}


@given(box=boxes(12), factor=factors)
def test_a_box_reduces_to_the_voxels_its_blocks_make(box: Box, factor: Triple) -> None:
    image = pyramid.image(box, factor)
    reduced = {tuple(v // f for v, f in zip(p, factor, strict=True)) for p in _voxels(box)}
    assert _voxels(image) == reduced


@given(box=boxes(10), factor=factors, size=st.tuples(*[st.integers(1, 40)] * 3))
def test_a_preimage_is_every_voxel_below_that_reduces_into_the_box(
    box: Box, factor: Triple, size: Triple
) -> None:
    below = pyramid.preimage(box, factor, size)
    inside = _voxels(box)
    want = {
        (x, y, z)
        for x in range(size[0]) for y in range(size[1]) for z in range(size[2])
        if (x // factor[0], y // factor[1], z // factor[2]) in inside
    }  # fmt: skip
    got = _voxels(below) if all(a < b for a, b in zip(*below, strict=True)) else set()
    assert got == want


@given(a=boxes(12), b=boxes(12))
def test_two_boxes_intersect_in_their_common_voxels(a: Box, b: Box) -> None:
    common = _voxels(a) & _voxels(b)
    both = intersect(a, b)
    if not common:
        assert both is None
    else:
        assert both is not None and _voxels(both) == common
        assert math.prod(pyramid.box_shape(both)) == len(common)


# -- what is asked for ----------------------------------------------------------------------------
def test_without_mips_there_is_no_pyramid_and_its_shape_options_are_refused() -> None:
    u8 = np.dtype(np.uint8)
    assert pyramid.requested(ConvertOptions(), "image", u8, (64, 64, 64), (8, 8, 8)) is None
    for given_option in ({"factor": (2, 2, 1)}, {"downsample": "mode"}):
        with pytest.raises(PlanError, match="shape a pyramid: add mips"):
            pyramid.requested(ConvertOptions(**given_option), "image", u8, (64, 64, 64), (8, 8, 8))


def test_a_pyramid_asked_for_is_validated_and_sized() -> None:
    u8, u32 = np.dtype(np.uint8), np.dtype(np.uint32)
    found = pyramid.requested(ConvertOptions(mips=2), "image", u8, (64, 30, 10), (8, 8, 8))
    assert found == (Pyramid(((2, 2, 2),) * 2, "average"), [(64, 30, 10), (32, 15, 5), (16, 8, 3)])
    labels = pyramid.requested(ConvertOptions(mips=1), "segmentation", u32, (4, 4, 4), (2, 2, 2))
    assert labels is not None and labels[0].method == "mode"
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"mips": 1, "hash": "murmurhash3_x86_128"}, "identity hash"),
        ({"mips": 1, "factor": (1, 1, 1)}, "at least one above 1"),
        ({"mips": 1, "downsample": "average"}, "average blends label ids"),
    ]
    for values, message in refusals:
        with pytest.raises(PlanError, match=message):
            pyramid.requested(ConvertOptions(**values), "segmentation", u32, (8, 8, 8), (2, 2, 2))


def test_a_pyramid_describes_itself_with_the_rules_it_was_built_by() -> None:
    described = Pyramid(((2, 2, 1), (2, 2, 1), (2, 2, 2)), "mode").to_json()
    assert described == {
        "levels": 4, "factors_xyz": [[2, 2, 1], [2, 2, 1], [2, 2, 2]], "factor_from": "as given",
        "method": "mode", "rules": downsample.RULES,
    }  # fmt: skip
    assert pyramid.steps_of(described) == [(2, 2, 1), (2, 2, 1), (2, 2, 2)]
    # a plan written when every level had one factor
    assert pyramid.steps_of({"levels": 3, "factor_xyz": [2, 2, 1]}) == [(2, 2, 1)] * 2


def test_box_limits_give_each_level_its_share_of_the_budget() -> None:
    pyr = Pyramid(((2, 2, 1), (2, 2, 2)), "average")
    mib = 1024**2
    assert pyramid.box_limits(None, 0, 64 * mib, (8, 8, 8), 512) == (None, (1, 1, 1))
    # A base task hands up 1/4 of its region (factor 4): a quarter of the budget, times 4.
    assert pyramid.box_limits(pyr, 0, 64 * mib, (3, 8, 8), 1000) == (
        4 * 64 * mib // 4 // 1000, (2, 1, 1))  # fmt: skip
    # An upper task holds its region: an eighth of the budget; whole blocks of its own step.
    assert pyramid.box_limits(pyr, 1, 64 * mib, (8, 8, 3), 1000) == (
        64 * mib // 8 // 1000, (1, 1, 2))  # fmt: skip
    assert pyramid.box_limits(pyr, 2, 64 * mib, (8, 8, 3), 1000)[1] == (1, 1, 1)  # the top
    assert pyramid.box_limits(pyr, 1, 16 * mib, (8, 8, 8), 10**9)[0] == 1  # at least 1


@pytest.mark.parametrize(
    "resolution, size, want",
    [
        ((8, 8, 40), (64, 64, 64), (2, 2, 1)),  # EM: Igneous's 2,2,1
        ((4, 4, 8), (64, 64, 64), (2, 2, 1)),  # z twice the finest: halving x,y makes it cubic
        ((4, 4, 4), (64, 64, 64), (2, 2, 2)),  # isotropic: all
        ((8, 8, 12), (64, 64, 64), (2, 2, 2)),  # near isotropic: all
        ((40, 8, 8), (64, 64, 64), (1, 2, 2)),  # x the coarse axis
        ((0.5, 0.5, 0.5), (64, 64, 1), (2, 2, 1)),  # a 2-D image: its one slice kept
        ((8, 8, 40), (64, 64, 1), (2, 2, 1)),
        ((8, 8, 40), (1, 1, 64), (1, 1, 2)),  # a line along the coarse axis: that axis
    ],
)
def test_the_default_factor_follows_the_voxel_size(
    resolution: tuple[float, float, float], size: Triple, want: Triple
) -> None:
    assert pyramid.voxel_step(resolution, size) == want
    step_at, why = pyramid.default_steps(resolution, None, "its info")
    assert step_at(resolution, size) == want and why.startswith("for the voxel size")


def test_each_level_takes_its_own_voxel_sizes_factor_until_near_isotropy_then_all() -> None:
    """8 x 8 x 40 nm EM: 2,2,1 twice (16 x 16 x 40, 32 x 32 x 40), then 2,2,2 (64 x 64 x 80),
    as Neuroglancer's near-isotropic scales and Igneous's EM pyramids go; auto stops once the
    level fits a chunk along every axis the next step would reduce."""
    u8 = np.dtype(np.uint8)
    size, chunk = (1024, 1024, 256), (64, 64, 64)
    found = pyramid.requested(ConvertOptions(mips=5), "image", u8, size, chunk,
                              resolution=(8, 8, 40))  # fmt: skip
    assert found is not None
    pyr, sizes = found
    assert pyr.steps == ((2, 2, 1), (2, 2, 1), (2, 2, 2), (2, 2, 2), (2, 2, 2))
    assert sizes[1:] == [(512, 512, 256), (256, 256, 256), (128, 128, 128), (64, 64, 64),
                         (32, 32, 32)]  # fmt: skip
    assert pyramid.level_resolution((8, 8, 40), pyr.steps, 3) == (64, 64, 80)
    auto = pyramid.requested(ConvertOptions(mips="auto"), "image", u8, size, chunk,
                             resolution=(8, 8, 40))  # fmt: skip
    assert auto is not None and auto[1][-1] == (64, 64, 64) and auto[0].levels == 5
    # a given factor is every level's
    given = pyramid.requested(ConvertOptions(mips=3, factor=(2, 2, 1)), "image", u8, size,
                              chunk, resolution=(8, 8, 40))  # fmt: skip
    assert given is not None and given[0].steps == ((2, 2, 1),) * 3


def test_the_source_s_own_pyramid_factor_wins_and_a_given_one_over_it() -> None:
    u8 = np.dtype(np.uint8)
    size, chunk = (64, 64, 64), (8, 8, 8)
    own = pyramid.requested(ConvertOptions(mips=1), "image", u8, size, chunk, resolution=(8, 8, 8),
                            source_factor=(2, 2, 1), where="its info")  # fmt: skip
    assert own is not None and own[0].steps == ((2, 2, 1),)
    assert own[0].to_json()["factor_from"] == "as the source's own pyramid: its info"
    em = pyramid.requested(ConvertOptions(mips=1), "image", u8, size, chunk, resolution=(8, 8, 40))
    assert em is not None and em[0].steps == ((2, 2, 1),)
    assert em[0].factor_from == "for the voxel size 8 x 8 x 40 nm"
    told = pyramid.requested(ConvertOptions(mips=1, factor=(2, 2, 2)), "image", u8, size, chunk,
                              resolution=(8, 8, 40), source_factor=(2, 2, 1))  # fmt: skip
    assert told is not None and told[0].steps == ((2, 2, 2),)
    assert told[0].factor_from == "as given"
