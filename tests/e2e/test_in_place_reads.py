"""What an addition reads of the dataset it adds to: meshes, skeletons and levels made in one
job read the scale once for all (the block group tasks reduce each block as they read it for
the meshes) and each group fetches each chunk its blocks read once; the chunks fetched, counted
by the files the job opened (Python's audit hook, the job run in this process), are exactly
those the plan announces: each chunk once, the groups handing each other the layer where they
meet. The levels are still tinybrain's reduction of the scale (read by
TensorStore), and the added objects verify."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from shardwright import api
from shardwright.additions import AdditionPlan
from shardwright.sources.precomputed import PrecomputedSource
from tests.support import label_shapes
from tests.support.opened import opened_below

pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")
pytest.importorskip("cloudvolume")
tinybrain = pytest.importorskip("tinybrain")
ts = pytest.importorskip("tensorstore")

CHUNKS = math.prod(-(-s // 32) for s in label_shapes.SHAPE)  # the scale's 32^3 chunks: 24


def _add(path: pathlib.Path, block: tuple[int, int, int]) -> tuple[AdditionPlan, int, int]:
    """Add meshes, skeletons and a level of 2,2,1 to the dataset at `path`, in this process;
    the plan, the chunks of its scale the plan fetched (its sampled blocks) and those the
    whole job fetched (plan included), counted by files opened."""
    values = dict(generate_meshes=True, generate_skeletons=True, mesh_block=block, mips=1,
                  factor=(2, 2, 1))  # fmt: skip
    scale = path / "8_8_16"
    with opened_below(scale) as planned:
        plan = api.plan(str(path), **values)
    with opened_below(scale) as opened:
        api.convert(str(path), scheduler="sync", **values)
    assert isinstance(plan, AdditionPlan)
    return plan, sum(planned.values()), sum(opened.values())


def _planned_reads(plan: AdditionPlan) -> int:
    """The chunk fetches the plan announces for its block groups."""
    assert isinstance(plan.source, PrecomputedSource)
    return plan.companions[0].generation.grid.chunk_reads(plan.source.scale.chunk_size)


def test_meshes_skeletons_and_a_level_read_the_scale_once(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "seg"
    label_shapes.write_precomputed(path)  # 128 x 96 x 64 at 8 x 8 x 16 nm, chunks of 32^3
    plan, sampled, opened = _add(path, (32, 32, 32))
    assert plan.feeding_blocks is not None
    assert "read once for all" in plan.report()
    grid = plan.companions[0].generation.grid
    # the job fetched what its plan said its groups fetch, and nothing for the level: each
    # chunk once (the groups, run last first, hand each other the layer where they meet)
    assert opened - sampled == _planned_reads(plan) == CHUNKS
    chunk = plan.source.scale.chunk_size  # type: ignore[attr-defined]
    assert grid.group_count > 1 and grid.chunk_reads(chunk, handed=False) > CHUNKS
    level = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}",
                     "scale_index": 1}).result().read().result()  # fmt: skip
    (want,) = tinybrain.downsample_segmentation(np.asfortranarray(label_shapes.labels()),
                                                (2, 2, 1))  # fmt: skip
    assert np.array_equal(np.asarray(level)[..., 0], want)
    for dataset in (str(path), f"{path}/mesh", f"{path}/skeletons"):
        report = api.verify(dataset, full=True)
        assert report.ok, (dataset, report.problems)


def test_blocks_the_level_cannot_take_read_it_apart(tmp_path: pathlib.Path) -> None:
    """Blocks of 31 voxels along x do not start on the 2,2,1 reduction's grid: the levels'
    own tasks read the scale once more, and the plan says so."""
    path = tmp_path / "seg"
    label_shapes.write_precomputed(path)
    plan, sampled, opened = _add(path, (31, 32, 32))
    assert plan.feeding_blocks is None
    assert "read once for all" not in plan.report()
    assert opened - sampled == _planned_reads(plan) + CHUNKS
    assert api.verify(str(path), full=True).ok
