"""Pyramid shard tasks: one level's shard, plus its reduced voxels for the level above.

A base-level task reads its region epoch by epoch exactly as `run_shard` does; each epoch is
also reduced and pasted into the pieces that the level above's tasks take (`plan.consumers`),
so the source is read once for the whole pyramid (an addition's levels may instead be fed by
its meshes' block group tasks: `run_feeding_group`). An upper-level task assembles its region
from the pieces its producers handed up (Dask results), encodes and writes its shard through
the same producers, and reduces the region for the level above. Either is a shard task
(`shard_task.run_task`) with the CPU or the batched producer; a shard kept on resume still has
its voxels read and reduced. Shard and epoch boxes sit on whole downsampling blocks
(planning/pyramid.py), so every reduction is exact at task boundaries, and the pieces of a
region tile it without overlap.

Memory (the plan's model, `peak_task_bytes`): a base task holds an epoch, its encoded chunks
(spooled to disk beyond a quarter of the budget) and its reduced output (at most a quarter);
an upper task holds its region (at most an eighth) as inputs and assembled, its encoded chunks
and a reduced output eight (or four) times smaller; reductions work in slabs of 1/32.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from shardwright.common.boxes import intersect, within
from shardwright.common.downsample import downsample
from shardwright.common.receipts import Receipt
from shardwright.engine.batched import BatchedProducer
from shardwright.engine.blocks import Block, epoch_blocks
from shardwright.engine.cpu import CpuProducer
from shardwright.engine.generated_objects import BlockDone, run_block_group
from shardwright.engine.shard_task import Producer, run_task
from shardwright.errors import PyramidError
from shardwright.planning import ConversionPlan, ShardTask, pyramid
from shardwright.planning.feeding import group_consumers
from shardwright.planning.generated import GeneratedPlan
from shardwright.stores import Store

Piece = tuple[tuple[int, int, int], np.ndarray]  # (origin in the level's voxels, [x, y, z, c])
Handoff = dict[str, Piece]  # key of a task of the level above -> the piece it takes


def run_pyramid_shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    pieces: Sequence[Piece] = (),
    *,
    resume: bool = False,
    spool_dir: str | None = None,
    xp: Any = None,
) -> tuple[Receipt | None, Handoff]:
    """Write one shard of any level of `plan` (the base plan); return its receipt and the
    pieces for the level above. A shard kept on resume is not rewritten, but its voxels are
    still reduced: the level above needs them. A base that is stored already
    (`plan.writes_base` False: levels added in place) is read and reduced, never written: no
    receipt.

    With an array namespace `xp` (CuPy on GPU workers; NumPy for the CPU twin) the shard goes
    through the batched engine and the reductions run in `xp` too; only the reduced pieces
    come back to the host.
    """
    level = plan.level_plan(task.level)
    space = np if xp is None else xp
    handoff = Handoffs(plan, task.level, plan.consumers(task), space)
    blocks: Iterator[Block]
    if task.level == 0:  # epochs of the source, each reduced as it is read
        blocks = epoch_blocks(level, task, space, on_epoch=handoff.add)
        if not plan.writes_base:
            deque(blocks, maxlen=0)
            return None, handoff.finish()
    else:  # the region the level below handed up, reduced at once
        box = level.voxel_box(task)
        region = space.asarray(assemble(box, pieces, level.dtype, level.num_channels))
        handoff.add(box[0], region)
        blocks = iter([(task.chunk_start, task.chunk_stop, region)])
        del region
    producer: Producer = (
        CpuProducer(level, task, spool_dir=spool_dir, blocks=blocks)
        if xp is None
        else BatchedProducer(level, task, xp, blocks)
    )
    receipt = run_task(
        task.key,
        store,
        producer,
        resume=resume,
        level=task.level,
        on_kept=lambda: deque(blocks, maxlen=0),  # read (and reduce) what it did not need
    )
    return receipt, handoff.finish()


def run_feeding_group(
    levels: ConversionPlan,
    blocks: GeneratedPlan,
    group: tuple[int, int, int],
    store: Store,
    *,
    resume: bool,
    on_done: Callable[[BlockDone], BlockDone],
) -> tuple[list[BlockDone], Handoff]:
    """A meshes' block group task that is also a base task of an addition's levels: its
    blocks' spools (`store`: the meshes') and the pieces of its reduced voxels for the first
    new level, from the one read of each block (a kept spool's core is read for them)."""
    handoffs = Handoffs(levels, 0, group_consumers(levels, blocks.generation.grid, group))
    done = run_block_group(blocks, group, store, resume=resume, on_done=on_done,
                           on_read=handoffs.add)  # fmt: skip
    return done, handoffs.finish()


def assemble(
    box: pyramid.Box, pieces: Sequence[Piece], dtype: np.dtype, channels: int
) -> np.ndarray:
    """A region [x, y, z, c] from the non-overlapping pieces that tile it."""
    shape = pyramid.box_shape(box)
    if len(pieces) == 1 and tuple(pieces[0][0]) == box[0] and pieces[0][1].shape[:3] == shape:
        return pieces[0][1]  # one producer covered it all: no copy
    region = np.empty((*shape, channels), dtype=dtype, order="F")
    filled = 0
    for origin, voxels in pieces:
        lo = [o - a for o, a in zip(origin, box[0], strict=True)]
        region[
            lo[0] : lo[0] + voxels.shape[0],
            lo[1] : lo[1] + voxels.shape[1],
            lo[2] : lo[2] + voxels.shape[2],
        ] = voxels
        filled += math.prod(voxels.shape[:3])
    if filled != math.prod(shape):
        raise RuntimeError(
            f"pieces cover {filled} of the {math.prod(shape)} voxels of region {box}: "
            "the pyramid graph is inconsistent"
        )
    return region


class Handoffs:
    """Reduces blocks of a task's region (of `level`) and pastes them into the pieces its
    `consumers` (the level above's tasks, each with the part it takes) take."""

    def __init__(
        self,
        plan: ConversionPlan,
        level: int,
        consumers: Sequence[tuple[ShardTask, pyramid.Box]],
        xp: Any = np,
    ):
        assert plan.pyramid is not None
        self.xp = xp
        self.factor = plan.pyramid.step(level) if consumers else (1, 1, 1)  # the top: none
        self.method = plan.pyramid.method
        self.slab = plan.reduce_slab_bytes
        self.parts: dict[str, tuple[pyramid.Box, np.ndarray]] = {}
        self.filled: dict[str, int] = {}
        for other, part in consumers:
            shape = (*pyramid.box_shape(part), plan.num_channels)
            self.parts[other.key] = (part, np.empty(shape, dtype=plan.dtype, order="F"))
            self.filled[other.key] = 0

    def add(self, origin: tuple[int, int, int], block: np.ndarray) -> None:
        """Reduce a block whose origin is a downsampling-block corner."""
        if not self.parts:
            return  # the top level hands nothing up
        if any(o % f for o, f in zip(origin, self.factor, strict=True)):
            raise PyramidError(f"block origin {origin} is not on the factor {self.factor} grid")
        reduced = downsample(self.xp, block, self.factor, self.method, max_slab_bytes=self.slab)
        if self.xp is not np:
            reduced = self.xp.asnumpy(reduced)  # the pieces travel through Dask on the host
        start = pyramid.triple(o // f for o, f in zip(origin, self.factor, strict=True))
        stop = pyramid.triple(a + n for a, n in zip(start, reduced.shape[:3], strict=True))
        for key, (part, array) in self.parts.items():
            overlap = intersect((start, stop), part)
            if overlap is None:
                continue
            array[within(overlap, part[0])] = reduced[within(overlap, start)]
            self.filled[key] += math.prod(pyramid.box_shape(overlap))

    def finish(self) -> Handoff:
        out: Handoff = {}
        for key, (part, array) in self.parts.items():
            if self.filled[key] != math.prod(pyramid.box_shape(part)):
                raise RuntimeError(
                    f"reduced {self.filled[key]} of the {math.prod(pyramid.box_shape(part))} "
                    f"voxels handed to {key}: epochs did not tile the shard"
                )
            out[key] = (part[0], array)
        return out
