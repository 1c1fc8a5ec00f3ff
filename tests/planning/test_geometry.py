"""The arithmetic every volume plan starts from: chunk sizes, epoch shapes within a budget,
the zarr output's axis order, and where a voxel size and offset came from."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.errors import PlanError
from shardwright.options import ConvertOptions
from shardwright.planning.geometry import (
    DEFAULT,
    OPTION,
    Geometry,
    Placed,
    chunk_size,
    epoch_shape,
    output_axes,
    to_axes,
    to_zarr_order,
)
from shardwright.planning.pyramid import Pyramid
from shardwright.sources import SourceHints, open_source
from shardwright.sources.units import NANOMETER

Triple = tuple[int, int, int]


# -- chunk size ---------------------------------------------------------------------------------
def test_the_default_chunk_is_64_cubed_clipped_to_the_volume() -> None:
    assert chunk_size(None, (100, 30, 64)) == (64, 30, 64)
    assert chunk_size(None, (1, 1, 1)) == (1, 1, 1)


def test_a_chunk_size_asked_for_is_kept_when_it_fits() -> None:
    assert chunk_size((10, 20, 30), (10, 200, 300)) == (10, 20, 30)


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ((0, 8, 8), "three positive integers x,y,z, got"),
        ((8, -1, 8), "three positive integers"),
        ((8, 8), "three positive integers"),
        ((8, 8, 8, 8), "three positive integers"),
        ((8, 101, 8), r"chunk size 8 x 101 x 8 does not fit the volume size 100 x 100 x 100"),
    ],
)
def test_a_chunk_size_that_cannot_be_used_is_refused(
    requested: tuple[int, ...], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        chunk_size(requested, (100, 100, 100))  # type: ignore[arg-type]


# -- epochs -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shard", "budget", "step", "epoch"),
    [
        ((8, 8, 8), 512, (1, 1, 1), (8, 8, 8)),  # fits whole
        ((8, 8, 8), 64, (1, 1, 1), (8, 8, 1)),  # z halved three times first
        ((8, 8, 8), 16, (1, 1, 1), (8, 2, 1)),  # then y
        ((8, 8, 8), 1, (1, 1, 1), (1, 1, 1)),  # then x, down to one chunk
        ((8, 8, 8), 16, (2, 2, 2), (4, 2, 2)),  # whole steps: never below 2
        ((6, 6, 6), 1, (4, 4, 4), (4, 4, 4)),  # 6 -> 4 (a multiple of the step), not 3
        ((3, 3, 3), 1, (4, 4, 4), (3, 3, 3)),  # already below the step: kept
    ],
)
def test_epoch_shapes_by_hand(shard: Triple, budget: int, step: Triple, epoch: Triple) -> None:
    assert epoch_shape(shard, 1, budget, step) == epoch


@given(
    shard=st.tuples(*[st.integers(1, 40)] * 3),
    raw_chunk=st.integers(1, 5000),
    budget=st.integers(1, 10**7),
    step=st.tuples(*[st.sampled_from([1, 2, 3, 4])] * 3),
)
def test_an_epoch_fits_the_budget_keeps_whole_steps_and_splits_z_first(
    shard: Triple, raw_chunk: int, budget: int, step: Triple
) -> None:
    epoch = epoch_shape(shard, raw_chunk, budget, step)
    smallest = tuple(min(s, t) for s, t in zip(shard, step, strict=True))
    for e, s, t in zip(epoch, shard, step, strict=True):
        assert 1 <= e <= s
        assert e % t == 0 or e == s
    fits = math.prod(epoch) * raw_chunk <= budget
    assert fits or epoch == smallest  # over budget only when nothing can shrink further
    # z is split before y, y before x: an axis below its shard means the later ones are done.
    for dim in (0, 1):
        if epoch[dim] < shard[dim]:
            assert all(epoch[d] == smallest[d] for d in range(dim + 1, 3))
    # The last axis split was split no further than needed: twice its extent does not fit.
    split = [d for d in range(3) if epoch[d] < shard[d]]
    if split:
        d = min(split)
        doubled = list(epoch)
        doubled[d] = min(shard[d], 2 * epoch[d])
        assert math.prod(doubled) * raw_chunk > budget


# -- axis orders ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source_axes", "channels", "axes"),
    [("zyx", 1, "zyx"), ("czyx", 3, "czyx"), ("tczyx", 1, "zyx"), ("xyz", 2, "cxyz"),
     ("zyxc", 4, "czyx"), ("yxz", 1, "yxz")],
)  # fmt: skip
def test_zarr_output_axes_put_channels_first_and_keep_the_space_order(
    source_axes: str, channels: int, axes: str
) -> None:
    assert output_axes(source_axes, channels) == axes


def test_values_follow_the_arrays_axis_order() -> None:
    assert to_axes((1, 2, 3), 9, "czyx") == (9, 3, 2, 1)
    assert to_axes(["a", "b", "c"], "ch", "yxz") == ("b", "a", "c")
    assert to_axes((1, 2, 3), 0, "xyz") == (1, 2, 3)


@given(
    order=st.permutations("xyz"),
    channels=st.integers(1, 3),
    shape=st.tuples(*[st.integers(1, 4)] * 3),
)
def test_a_block_viewed_in_zarr_order_holds_each_voxel_where_its_axes_say(
    order: list[str], channels: int, shape: Triple
) -> None:
    axes = ("c" if channels > 1 else "") + "".join(order)
    block = np.arange(math.prod(shape) * channels).reshape(*shape, channels)
    out = to_zarr_order(block, axes)
    assert out.shape == to_axes(shape, channels, axes)
    for x, y, z, c in itertools.product(*(range(n) for n in (*shape, channels))):
        assert out[to_axes((x, y, z), c, axes)] == block[x, y, z, c]


# -- placement ------------------------------------------------------------------------------------
def test_a_source_unit_and_subvoxel_offset_pass_only_where_the_source_placed_it() -> None:
    hints = SourceHints(unit="micrometer", subvoxel_offset=(0.5, 0.5, 0.0))
    own = Placed.of(hints, "OME-Zarr 0.4 dataset '1'", "OME-Zarr 0.4 dataset '1'")
    assert own.unit == "micrometer" and own.subvoxel_offset == (0.5, 0.5, 0.0)
    sized = Placed.of(hints, OPTION, "its info")  # a voxel size in nm was given
    assert sized.unit == NANOMETER and sized.subvoxel_offset == (0.0, 0.0, 0.0)
    moved = Placed.of(hints, "its info", OPTION)  # the offset was given: the unit stays
    assert moved.unit == "micrometer" and moved.subvoxel_offset == (0.0, 0.0, 0.0)
    bare = Placed.of(SourceHints(), DEFAULT, DEFAULT)
    assert bare == Placed()
    assert own.to_json() == {
        "resolution_from": "OME-Zarr 0.4 dataset '1'",
        "voxel_offset_from": "OME-Zarr 0.4 dataset '1'",
        "unit": "micrometer",
        "subvoxel_offset_xyz": [0.5, 0.5, 0.0],
    }
    recorded = SourceHints(resolution=(8, 8, 40), voxel_offset=(1, 2, 3), placed_by="its info")
    given = Placed.of(recorded, OPTION, "its info").to_json()  # the source's kept beside
    assert given["source_resolution_xyz"] == [8, 8, 40] and "source_voxel_offset_xyz" not in given
    assert given["source_placed_by"] == "its info"


def _geometry(size: Triple, chunk: Triple, pyramid: Pyramid | None = None) -> Geometry:
    array = np.zeros((*size[::-1], 3), np.uint16)  # c last: "zyxc"
    return Geometry(
        source=open_source(array, axes="zyxc"),
        dest="/nowhere",
        options=ConvertOptions(memory_budget=64 * 1024**2),
        layer_type="image",
        dtype=np.dtype(np.uint16),
        num_channels=3,
        size=size,
        chunk_size=chunk,
        voxel_offset=(0, 0, 0),
        resolution=(1.0, 1.0, 1.0),
        pyramid=pyramid,
    )


def test_a_geometry_counts_chunks_bytes_and_its_epoch_budget() -> None:
    geo = _geometry((100, 64, 1), (32, 64, 1))
    assert geo.grid_shape == (4, 1, 1)  # a partial chunk at the x edge counts
    assert geo.raw_chunk_bytes == 32 * 64 * 1 * 3 * 2
    assert geo.epoch_budget == 16 * 1024**2  # a quarter of the budget
    with_levels = _geometry((100, 64, 1), (32, 64, 1), Pyramid(((2, 2, 1),) * 2, "average"))
    assert with_levels.epoch_budget == 8 * 1024**2  # an eighth with a pyramid
    assert set(geo.plan_fields()) == {
        "source", "dest", "options", "layer_type", "dtype", "num_channels", "size",
        "chunk_size", "voxel_offset", "resolution", "pyramid", "placed",
    }  # fmt: skip
