"""A volume's plan and what follows from it, on random geometries of both formats, with and
without pyramids: every chunk of every level in exactly one shard, shards inside the volume,
epochs tiling their shard once within the budget, the shards a box touches, and producers
and consumers between levels handing each voxel over exactly once."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright import api
from shardwright.common.boxes import Box, intersect
from shardwright.planning import ConversionPlan, ShardTask

Triple = tuple[int, int, int]


def _plan(size: Triple, chunk: Triple, **options: Any) -> ConversionPlan:
    """A plan of an array in memory (x, y, z sizes); nothing is written."""
    volume: Any = np.zeros(size[::-1], np.uint8)
    plan = api.plan(volume, "/nowhere/out", chunk_size=chunk, resolution=(1, 1, 1), **options)
    assert isinstance(plan, ConversionPlan)
    return plan


@st.composite
def plans(draw: st.DrawFn) -> ConversionPlan:
    size = draw(st.tuples(*[st.integers(2, 48)] * 3))
    chunk = tuple(draw(st.integers(1, s)) for s in size)
    fmt = draw(st.sampled_from(["precomputed", "zarr3"]))
    options: dict[str, Any] = {
        "format": fmt,
        "compression": "none",
        "target_shard_bytes": draw(st.sampled_from([1, 64, 4096])) * math.prod(chunk),
        "min_shards": draw(st.integers(1, 8)),
    }
    if draw(st.booleans()):
        factor = draw(st.sampled_from([(2, 2, 2), (2, 2, 1), (3, 1, 2)]))
        options["factor"] = factor
        options["mips"] = min(draw(st.integers(1, 2)), _most_levels(size, factor))
    return _plan(size, chunk, **options)  # type: ignore[arg-type]


def _most_levels(size: Triple, factor: Triple) -> int:
    levels = 0
    while any(s > 1 for s, f in zip(size, factor, strict=True) if f > 1):
        size = tuple(-(-s // f) for s, f in zip(size, factor, strict=True))  # type: ignore[assignment]
        levels += 1
    return levels


def _voxels(box: Box) -> tuple[slice, slice, slice]:
    return tuple(slice(a, b) for a, b in zip(*box, strict=True))  # type: ignore[return-value]


@settings(max_examples=30)
@given(plan=plans())
def test_every_level_is_tiled_by_its_shards_and_each_shard_by_its_epochs(
    plan: ConversionPlan,
) -> None:
    assert plan.level_count == (1 if plan.pyramid is None else plan.pyramid.levels)
    total = 0
    for level in range(plan.level_count):
        here = plan.level_plan(level)
        assert here.level == level
        covered = np.zeros(here.grid_shape, np.int32)
        voxels = np.zeros(here.size, np.int32)
        tasks = list(here.shards())
        assert len(tasks) == here.shard_count and len({t.key for t in tasks}) == len(tasks)
        total += len(tasks)
        for task in tasks:
            assert task.level == level and not task.scattered
            ends = zip(task.chunk_start, task.chunk_stop, here.grid_shape, strict=True)
            assert all(0 <= a < b <= g for a, b, g in ends)
            assert task.chunk_count == math.prod(
                b - a for a, b in zip(task.chunk_start, task.chunk_stop, strict=True)
            )
            covered[_voxels((task.chunk_start, task.chunk_stop))] += 1
            voxels[_voxels(here.voxel_box(task))] += 1
            epochs = np.zeros(here.grid_shape, np.int32)
            for epoch in here.epochs(task):
                assert all(b - a <= e for a, b, e in
                           zip(*epoch, here.epoch_shape_chunks, strict=True))  # fmt: skip
                epochs[_voxels(epoch)] += 1
            inside = epochs[_voxels((task.chunk_start, task.chunk_stop))]
            assert (inside == 1).all() and epochs.sum() == task.chunk_count
        assert (covered == 1).all(), f"level {level}: a chunk not in exactly one shard"
        assert (voxels == 1).all(), f"level {level}: a voxel not in exactly one shard's box"
        assert here.peak_task_bytes <= plan.options.memory_budget
    assert plan.shard_total == total


@settings(max_examples=30)
@given(plan=plans(), data=st.data())
def test_the_shards_a_box_touches_are_those_whose_voxels_meet_it(
    plan: ConversionPlan, data: st.DataObject
) -> None:
    level = plan.level_plan(data.draw(st.integers(0, plan.level_count - 1)))
    start = tuple(data.draw(st.integers(0, s - 1)) for s in level.size)
    stop = tuple(data.draw(st.integers(a + 1, s)) for a, s in zip(start, level.size, strict=True))
    box: Box = (start, stop)  # type: ignore[assignment]
    want = [t for t in level.shards() if intersect(level.voxel_box(t), box) is not None]
    assert level.tasks_overlapping(box) == want  # the same tasks, in shard order


@settings(max_examples=30)
@given(plan=plans().filter(lambda p: p.pyramid is not None))
def test_each_upper_voxel_is_handed_over_by_exactly_one_producer(plan: ConversionPlan) -> None:
    for level in range(1, plan.level_count):
        here = plan.level_plan(level)
        for task in here.shards():
            region = here.voxel_box(task)
            got = np.zeros(here.size, np.int32)
            producers = plan.producers(task)
            assert producers and all(p.level == level - 1 for p in producers)
            for producer in producers:
                parts = [part for t, part in plan.consumers(producer) if t == task]
                assert len(parts) == 1, "a producer feeds its consumer one box"
                got[_voxels(parts[0])] += 1
            assert (got[_voxels(region)] == 1).all() and got.sum() == math.prod(
                b - a for a, b in zip(*region, strict=True)
            )
    top = plan.level_plan(plan.level_count - 1)
    assert all(plan.consumers(t) == [] for t in top.shards())
    assert all(plan.producers(t) == [] for t in plan.shards())


def test_shards_and_epochs_by_hand() -> None:
    # 40 x 24 x 10 voxels of 8 x 8 x 4 chunks: a 5 x 3 x 3 grid; zarr3 boxes of 2 x 2 x 1.
    plan = _plan((40, 24, 10), (8, 8, 4), format="zarr3", compression="none",
                 target_shard_bytes=4 * 256, min_shards=1)  # fmt: skip
    assert plan.grid_shape == (5, 3, 3) and plan.shard_shape_chunks == (2, 2, 1)
    assert plan.shard_grid_shape == (3, 2, 3) and plan.shard_count == 18
    first = list(plan.shards())[:4]  # z outermost, x fastest
    assert [(t.chunk_start, t.chunk_stop) for t in first] == [
        ((0, 0, 0), (2, 2, 1)), ((2, 0, 0), (4, 2, 1)), ((4, 0, 0), (5, 2, 1)),
        ((0, 2, 0), (2, 3, 1)),
    ]  # fmt: skip
    assert [t.key for t in first] == ["0/c/0/0/0", "0/c/0/0/1", "0/c/0/0/2", "0/c/0/1/0"]
    assert plan.voxel_box(first[2]) == ((32, 0, 0), (40, 16, 4))  # cut at the volume's end
    assert plan.chunks_per_shard == 4 and plan.chunk_count == 45
    assert plan.estimated_shard_bytes == int(4 * 256 * plan.encoded_ratio)
    assert plan.epoch_bytes == math.prod(plan.epoch_shape_chunks) * 256
    assert plan.peak_task_bytes == 2 * plan.epoch_bytes + min(
        plan.estimated_shard_bytes, plan.spool_budget
    )
    assert plan.spool_budget == plan.options.memory_budget // 2
    assert plan.source_bytes == 40 * 24 * 10
    assert ShardTask("k", (1, 2, 3), (4, 4, 4)).chunk_count == 3 * 2 * 1


def test_a_level_plan_outside_the_pyramid_is_refused() -> None:
    plan = _plan((32, 32, 32), (8, 8, 8), mips=1)
    assert plan.level_plan(0) is plan and plan.level_plan(1).level == 1
    for level in (2, -1):
        with pytest.raises(IndexError, match=f"no pyramid level {level} in a plan of 2 level"):
            plan.level_plan(level)
    with pytest.raises(IndexError):
        plan.level_plan(1).level_plan(0)  # only the base plan holds the others


def test_the_description_counts_what_the_plan_lists() -> None:
    plan = _plan((40, 24, 10), (8, 8, 4), mips=1, factor=(2, 2, 1))
    described = plan.describe()
    assert described["chunks"] == 45 and described["grid_xyz"] == [5, 3, 3]
    assert described["shards"] == plan.shard_count == len(list(plan.shards()))
    assert [row["level"] for row in described["levels"]] == [0, 1]
    assert described["levels"][1]["size_xyz"] == [20, 12, 10]
    assert described["levels"][1]["handed_up_bytes_per_task"] == 0  # the top hands up nothing
    assert described["resolution_xyz"] == [1, 1, 1]  # whole numbers written as integers
    assert plan.for_shard_tasks().companions == ()
