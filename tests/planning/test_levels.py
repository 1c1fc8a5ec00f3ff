"""A pyramid's upper levels as the level planner makes them: sizes, chunks, resolutions and
offsets per level, shards on whole downsampling blocks that an upper task holds whole, one
`info` naming every scale, and the refusals of shards too big for the budget."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright import api
from shardwright.errors import PlanError, ShardwrightWarning
from shardwright.formats.precomputed.layout import PrecomputedLayout
from shardwright.formats.zarr3.layout import Zarr3Layout
from shardwright.planning import ConversionPlan
from shardwright.planning.pyramid import alignment_step, box_aligned

Triple = tuple[int, int, int]


def _plan(size: Triple, **options: Any) -> ConversionPlan:
    volume: Any = np.zeros(size[::-1], np.uint8)
    plan = api.plan(volume, "/nowhere/out", **options)
    assert isinstance(plan, ConversionPlan)
    return plan


def test_each_level_by_hand() -> None:
    plan = _plan((100, 60, 9), chunk_size=(32, 32, 8), mips=2, factor=(2, 2, 1),
                 resolution=(4, 4, 40), voxel_offset=(8, 4, 5))  # fmt: skip
    rows = [
        (p.level, p.size, p.chunk_size, p.resolution, p.voxel_offset, p.layout.level_key)
        for p in (plan.level_plan(k) for k in range(3))
    ]
    assert rows == [
        (0, (100, 60, 9), (32, 32, 8), (4.0, 4.0, 40.0), (8, 4, 5), "4_4_40"),
        (1, (50, 30, 9), (32, 30, 8), (8.0, 8.0, 40.0), (4, 2, 5), "8_8_40"),
        (2, (25, 15, 9), (25, 15, 8), (16.0, 16.0, 40.0), (2, 1, 5), "16_16_40"),
    ]
    layout = plan.layout
    assert isinstance(layout, PrecomputedLayout)
    assert [s.key for s in layout.info.scales] == ["4_4_40", "8_8_40", "16_16_40"]
    assert all(plan.level_plan(k).layout.info == layout.info for k in range(3))  # type: ignore[attr-defined]
    assert [d for d, _ in plan.metadata_documents()] == ["info"]
    assert len(plan.metadata_documents()[0][1]["scales"]) == 3


@settings(max_examples=25)
@given(
    size=st.tuples(st.integers(4, 90), st.integers(4, 90), st.integers(2, 30)),
    chunk=st.tuples(*[st.integers(1, 20)] * 3),
    factor=st.sampled_from([(2, 2, 2), (2, 2, 1), (3, 3, 1)]),
    fmt=st.sampled_from(["precomputed", "zarr3"]),
)
def test_upper_levels_hold_whole_blocks_and_their_region_fits_the_budget(
    size: Triple, chunk: Triple, factor: Triple, fmt: str
) -> None:
    chunk = tuple(min(c, s) for c, s in zip(chunk, size, strict=True))  # type: ignore[assignment]
    plan = _plan(size, chunk_size=chunk, mips="auto", factor=factor, format=fmt,
                 resolution=(1, 1, 1), target_shard_bytes=4096)  # fmt: skip
    budget = plan.options.memory_budget
    for k in range(1, plan.level_count):
        below, here = plan.level_plan(k - 1), plan.level_plan(k)
        assert here.size == tuple(-(-s // f) for s, f in zip(below.size, factor, strict=True))
        assert here.chunk_size == tuple(min(c, s) for c, s in zip(chunk, here.size, strict=True))
        assert here.epoch_shape_chunks == here.shard_shape_chunks  # held whole
        assert math.prod(here.shard_shape_chunks) * here.raw_chunk_bytes <= budget // 2
        assert not here.scattered and here.upper == ()
        if k + 1 < plan.level_count:  # reduced further: whole blocks of the next level
            step = alignment_step(here.chunk_size, factor)
            assert box_aligned(here.shard_shape_chunks, here.grid_shape, step)
        layout = here.layout
        assert isinstance(layout, PrecomputedLayout | Zarr3Layout)
        assert layout.level == k


def test_a_base_shard_handing_up_more_than_half_the_budget_is_refused() -> None:
    # 512 x 512 x 256 bytes in one shard (the bits given), halved along x and y: 16 MiB
    # handed up, more than half the 16 MiB budget.
    with pytest.raises(PlanError) as refused:
        _plan((512, 512, 256), chunk_size=(64, 64, 64), mips=1, factor=(2, 2, 1),
              resolution=(1, 1, 1), memory_budget=16 * 1024**2, compression="none",
              preshift_bits=9, minishard_bits=0)  # fmt: skip
    text = str(refused.value)
    assert "pyramid level 0: shards hand 16.0 MiB to the next level" in text
    assert "half the 16.0 MiB memory budget" in text and "memory_budget" in text


def test_an_offset_not_divisible_by_the_factor_is_warned_of_in_precomputed() -> None:
    warning = "pyramid level 1: its voxel offset 1,0,0 is the base offset 3,0,0 divided by 2,2,2"
    with pytest.warns(ShardwrightWarning, match=warning):
        _plan((16, 16, 16), chunk_size=(8, 8, 8), mips=1, resolution=(1, 1, 1),
              voxel_offset=(3, 0, 0))  # fmt: skip
