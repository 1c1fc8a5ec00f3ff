"""Meshes and skeletons planned with the segmentation they are made from: the block grid at
the level meshed, the segments estimated from sampled blocks, each block task's memory, the
shardings fixed before any block runs, and the refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardwright import api
from shardwright.errors import PlanError, ShardwrightError
from shardwright.generation.exchange import MESH, SKELETON
from shardwright.planning import ConversionPlan
from shardwright.planning.generated import BYTES_PER_BLOCK_VOXEL, GeneratedPlan


def _labels() -> np.ndarray:
    """40 x 30 x 20 voxels (x, y, z): 1 in the low z and x half, 2 in the high halves, 3 in a
    5 x 5 column at the corner."""
    labels = np.zeros((20, 30, 40), np.uint32)
    labels[:10, :, :20] = 1
    labels[10:, :, 20:] = 2
    labels[:, :5, :5] = 3
    return labels


def _plan(volume: Any = None, **options: Any) -> ConversionPlan:
    values: dict[str, Any] = {"resolution": (4, 4, 40), "generate_meshes": True} | options
    source: Any = _labels() if volume is None else volume
    plan = api.plan(source, "/nowhere/out", **values)
    assert isinstance(plan, ConversionPlan)
    return plan


def _generated(plan: ConversionPlan) -> list[GeneratedPlan]:
    found = [c for c in plan.companions if isinstance(c, GeneratedPlan)]
    assert len(found) == len(plan.companions)
    return found


def test_both_outputs_share_one_grid_and_the_first_runs_the_blocks() -> None:
    plan = _plan(generate_skeletons=True, mesh_block=(16, 16, 8))
    meshes, skeletons = _generated(plan)
    assert (meshes.output, skeletons.output) == (MESH, SKELETON)
    assert (meshes.dest, skeletons.dest) == ("/nowhere/out/mesh", "/nowhere/out/skeletons")
    assert meshes.generation is skeletons.generation
    grid = meshes.generation.grid
    assert (grid.shape, grid.block, grid.factor) == ((40, 30, 20), (16, 16, 8), (1, 1, 1))
    assert grid.resolution == (4, 4, 40) and grid.origin_nm == (2, 2, 20)  # voxel centres
    assert meshes.runs_blocks and not skeletons.runs_blocks
    assert meshes.block_count == 3 * 2 * 3 and skeletons.block_count == 0
    assert meshes.source_bytes == 40 * 30 * 20 * 4 and skeletons.source_bytes == 0
    assert meshes.block_task_bytes == 17 * 17 * 9 * (4 + BYTES_PER_BLOCK_VOXEL)
    assert meshes.generation.exchange == "/nowhere/out/mesh"
    info = plan.metadata_documents()[-1][1]
    assert (info["mesh"], info["skeletons"]) == ("mesh", "skeletons")
    assert meshes.info["@type"] == "neuroglancer_multilod_draco"
    assert skeletons.info["vertex_attributes"][0]["id"] == "radius"
    assert meshes.sharding.data_encoding == "raw" and skeletons.sharding.data_encoding == "gzip"
    assert list(meshes.shards()) == [] and meshes.for_shard_tasks() is meshes


def test_segments_are_estimated_from_four_sampled_blocks() -> None:
    # Blocks 0, 5, 11 and 17 of 18 are sampled: {1, 3}, nothing, {2}, {2}: 4 ids in 4 blocks.
    (meshes,) = _generated(_plan(mesh_block=(16, 16, 8)))
    assert meshes.generation.estimated_segments == 18
    assert meshes.shard_count == 1 == meshes.sharding.num_shards
    assert meshes.shard_total == 18 + 1
    (chosen,) = _generated(_plan(mesh_block=(16, 16, 8), object_ids=(1, 3)))
    assert chosen.generation.estimated_segments == 2
    wants = [chosen.generation.wants(s) for s in (0, 1, 2, 3)]
    assert wants == [False, True, False, True]
    assert meshes.generation.wants(2) and not meshes.generation.wants(0)


def test_a_coarser_level_is_meshed_on_its_own_voxels() -> None:
    plan = _plan(mips=1, factor=(2, 2, 1), mesh_level=1, voxel_offset=(2, 0, 1),
                 mesh_lods=3, mesh_max_error=10)  # fmt: skip
    (meshes,) = _generated(plan)
    grid = meshes.generation.grid
    assert grid.shape == (20, 15, 20) and grid.factor == (2, 2, 1)
    assert grid.resolution == (8, 8, 40) and grid.block == (20, 15, 20)  # clipped to the level
    assert grid.origin_nm == (2 * 4 + 4, 0 + 4, 40 + 20)
    assert meshes.generation.steps == ((2, 2, 1),) and meshes.generation.level == 1
    assert (meshes.generation.lods, meshes.generation.max_error) == (3, 10.0)
    described = meshes.describe()
    assert described["generated_from_level"] == 1 and described["lods"] == 3
    assert "levels of detail 3, error 10 nm" in meshes.report()


def test_a_level_made_by_factors_of_its_own_is_meshed_on_its_own_voxels() -> None:
    """4 x 4 x 40 nm, no factor: levels 1-3 halve x and y, level 4 every axis; meshes of
    level 4 are made on blocks of 16 x 16 x 2 base voxels, each reduced level by level."""
    plan = _plan(mips=4, mesh_level=4)
    assert plan.pyramid is not None
    (meshes,) = _generated(plan)
    assert meshes.generation.steps == ((2, 2, 1),) * 3 + ((2, 2, 2),) == plan.pyramid.steps
    grid = meshes.generation.grid
    assert grid.factor == (16, 16, 2) and grid.resolution == (64, 64, 80)
    assert grid.shape == plan.level_plan(4).size


@pytest.mark.parametrize(
    ("volume", "options", "error", "message"),
    [
        (np.zeros((8, 8, 8), np.uint8), {}, PlanError,
         r"need a segmentation \(integer labels\), not an image of uint8"),
        (None, {"format": "zarr3"}, PlanError,
         "beside a precomputed volume: use format precomputed"),
        # (a precomputed segmentation has one channel: its info refuses two first)
        (np.zeros((2, 8, 8, 8), np.uint32), {"source_axes": "czyx"}, ShardwrightError,
         "a segmentation must have 1 channel, got 2"),
        (None, {"mesh_level": 1}, PlanError,
         r"mesh_level 1: the volume has 1 level\(s\); pass mips"),
    ],
)  # fmt: skip
def test_what_cannot_be_meshed_is_refused(
    volume: np.ndarray | None, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _plan(volume, **options)


def test_a_block_task_over_the_budget_is_refused() -> None:
    with pytest.raises(PlanError) as refused:
        _plan(np.zeros((128, 128, 128), np.uint32), memory_budget=16 * 1024**2,
              mesh_block=(128, 128, 128))  # fmt: skip
    text = str(refused.value)
    assert "a block task of 128 x 128 x 128 voxels needs ~" in text
    assert "more than memory_budget 16.0 MiB: pass a smaller mesh_block" in text
