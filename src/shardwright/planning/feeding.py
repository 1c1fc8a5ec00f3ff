"""Block groups feeding a pyramid's first new level: where meshes and levels added by one job
read the scale once, the generated objects' block tasks hand their reduced voxels up to the
first new level's tasks instead of those reading them again (engine/pyramid.py,
jobs/shard_stream.py)."""

from __future__ import annotations

from shardwright.generation.grid import BlockGrid, Triple, three
from shardwright.planning import pyramid
from shardwright.planning.volume import ConversionPlan, ShardTask


def feeding(levels: ConversionPlan, grid: BlockGrid, meshed: str, read: str) -> bool:
    """Whether block tasks on `grid`, reading scale `meshed`, can be the base tasks of
    `levels` (which reduce scale `read`): the same voxels, every block starting on the
    reduction's grid (its size a multiple of the factor)."""
    assert levels.pyramid is not None
    return (
        meshed == read
        and grid.factor == (1, 1, 1)
        and grid.shape == three(levels.size)
        and all(b % f == 0 for b, f in zip(grid.block, levels.pyramid.step(0), strict=True))
    )


def group_consumers(
    levels: ConversionPlan, grid: BlockGrid, group: Triple
) -> list[tuple[ShardTask, pyramid.Box]]:
    """The first new level's tasks that take a part of a block group's reduced voxels, each
    with that part (in the new level's voxels)."""
    return levels.takers(0, grid.group_core(group))


def group_producers(levels: ConversionPlan, grid: BlockGrid, task: ShardTask) -> list[Triple]:
    """The block groups whose reduced voxels make up a first new level task's region."""
    assert levels.pyramid is not None and task.level == 1
    region = pyramid.preimage(
        levels.level_plan(1).voxel_box(task), levels.pyramid.step(0), three(levels.size)
    )
    return grid.groups_over(*region)
