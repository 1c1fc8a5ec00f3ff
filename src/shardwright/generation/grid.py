"""The block grid meshes and skeletons are made on, in voxels of the level they come from.

A block is one finest-level mesh fragment. It is read with one more voxel on each high side
where a neighbour follows, so that neighbouring surfaces and skeletons meet on the shared
plane (marching cubes and TEASAR see the same voxels there). That overlap reaches into the
next block's chunks: blocks are made in groups (`group` blocks along each axis), one task per
group, which fetches each chunk its blocks read once (sources/chunk_reuse.py); at a group's
high faces the overlap lies in the next group, which hands that layer over
(generation/faces.py), so each chunk is fetched once in all where the neighbour ran first, and
twice at a group face where it did not (`chunk_reads`, `choose_group`).
Positions are in nm: a voxel's centre, as Neuroglancer draws a segmentation, so the grid's
origin is the centre of the level's voxel (0, 0, 0).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

Triple = tuple[int, int, int]
T = TypeVar("T")


def three(values: Iterable[T]) -> tuple[T, T, T]:
    """Three values x, y, z as a typed tuple (a generator or list of them has no length)."""
    x, y, z = values
    return (x, y, z)


@dataclass(frozen=True)
class BlockGrid:
    """Blocks over a level of `shape` voxels of `resolution` nm; `factor`: base voxels per
    level voxel along each axis (what a block task reads and reduces)."""

    shape: Triple
    block: Triple
    resolution: tuple[float, float, float]
    factor: Triple
    origin_nm: tuple[float, float, float]  # centre of level voxel (0, 0, 0)
    group: Triple = (1, 1, 1)  # blocks per group task along each axis

    @property
    def counts(self) -> Triple:
        x, y, z = (-(-s // b) for s, b in zip(self.shape, self.block, strict=True))
        return (x, y, z)

    @property
    def block_count(self) -> int:
        x, y, z = self.counts
        return x * y * z

    @property
    def block_nm(self) -> tuple[float, float, float]:
        """The finest fragment's extent (the manifests' `chunk_shape`)."""
        x, y, z = (b * r for b, r in zip(self.block, self.resolution, strict=True))
        return (x, y, z)

    def positions(self) -> Iterator[Triple]:
        """Every block position, x fastest."""
        x, y, z = self.counts
        for k, j, i in itertools.product(range(z), range(y), range(x)):
            yield (i, j, k)

    def core(self, position: Triple) -> tuple[Triple, Triple]:
        """The voxels [start, stop) the block owns (its voxel counts come from these)."""
        start = three(p * b for p, b in zip(position, self.block, strict=True))
        stop = three(min(s + b, n) for s, b, n in zip(start, self.block, self.shape, strict=True))
        return start, stop

    def read_box(self, position: Triple) -> tuple[Triple, Triple]:
        """The voxels a block task reads: its core and one voxel more where a block follows."""
        start, stop = self.core(position)
        grown = three(min(s + 1, n) for s, n in zip(stop, self.shape, strict=True))
        return start, grown

    @property
    def group_counts(self) -> Triple:
        x, y, z = (-(-n // g) for n, g in zip(self.counts, self.group, strict=True))
        return (x, y, z)

    @property
    def group_count(self) -> int:
        x, y, z = self.group_counts
        return x * y * z

    def groups(self, *, last_first: bool = False) -> Iterator[Triple]:
        """Every group position, x fastest; `last_first`: from the last group to the first
        (the order the tasks run in, so that a group's neighbours above have run: faces.py)."""
        x, y, z = self.group_counts
        order = list(itertools.product(range(z), range(y), range(x)))
        for k, j, i in reversed(order) if last_first else order:
            yield (i, j, k)

    def group_of(self, position: Triple) -> Triple:
        """The group a block belongs to."""
        return three(p // g for p, g in zip(position, self.group, strict=True))

    def group_blocks(self, group: Triple) -> list[Triple]:
        """The positions of a group's blocks, x fastest."""
        x, y, z = (
            range(g * n, min((g + 1) * n, c))
            for g, n, c in zip(group, self.group, self.counts, strict=True)
        )
        return [(i, j, k) for k in z for j in y for i in x]

    def group_core(self, group: Triple) -> tuple[Triple, Triple]:
        """The voxels [start, stop) a group's blocks own."""
        blocks = self.group_blocks(group)
        return self.core(blocks[0])[0], self.core(blocks[-1])[1]

    def groups_over(self, start: Triple, stop: Triple) -> list[Triple]:
        """The groups owning any voxel of [start, stop), x fastest."""
        span = [b * g for b, g in zip(self.block, self.group, strict=True)]
        x, y, z = (range(a // n, -(-b // n)) for a, b, n in zip(start, stop, span, strict=True))
        return [(i, j, k) for k in z for j in y for i in x]

    def chunk_reads(self, chunk: Triple, *, handed: bool = True) -> int:
        """How many chunks of size `chunk` (base voxels) the group tasks fetch in all: each
        chunk of a group's own voxels once per group that owns some of them, where the
        groups hand each other the layer where they meet (`handed`); else also the chunks
        at each group's high faces that the one-voxel overlap reaches into."""
        total = 1
        beyond = 0 if handed else 1
        for axis, count in enumerate(self.group_counts):
            size = self.block[axis] * self.group[axis] * self.factor[axis]
            limit = self.shape[axis] * self.factor[axis]
            reads = 0
            for p in range(count):
                start = p * size
                stop = min((p + 1) * size + beyond * self.factor[axis], limit)
                reads += -(-stop // chunk[axis]) - start // chunk[axis]
            total *= reads
        return total

    def base_box(self, start: Triple, stop: Triple, limit: Triple) -> tuple[Triple, Triple]:
        """The base-level voxels [start, stop) that level box [start, stop) reduces from,
        within the base's `limit` (its shape)."""
        base_start = three(s * f for s, f in zip(start, self.factor, strict=True))
        base_stop = three(min(s * f, n) for s, f, n in zip(stop, self.factor, limit, strict=True))
        return base_start, base_stop

    def dataset_edges(
        self, position: Triple
    ) -> tuple[tuple[bool, bool, bool], tuple[bool, bool, bool]]:
        """(low, high): along each axis, whether the block's side is the dataset's edge."""
        start, stop = self.core(position)
        low = three(s == 0 for s in start)
        high = three(s == n for s, n in zip(stop, self.shape, strict=True))
        return low, high

    def block_origin_nm(self, position: Triple) -> tuple[float, float, float]:
        """Where the block's first voxel centre lies (block-local positions start there)."""
        x, y, z = (
            o + p * b * r
            for o, p, b, r in zip(
                self.origin_nm, position, self.block, self.resolution, strict=True
            )
        )
        return (x, y, z)

    def key(self, position: Triple) -> str:
        """A block's (or a group's) position as text: `1_0_2`."""
        return "_".join(str(p) for p in position)


def choose_group(counts: Triple, least: int, fits: Callable[[Triple], bool]) -> Triple:
    """Blocks per group along each axis: as large as leaves at least `least` groups (for
    parallelism) that `fits` (a task's memory). Grown by halving, each time, the groups along
    the axis where that removes the most group faces per block of its length (the chunks of a
    group's high faces are what is fetched twice)."""
    group = [1, 1, 1]
    while True:
        along = [-(-n // g) for n, g in zip(counts, group, strict=True)]
        choices = []
        for axis in range(3):
            if along[axis] < 2:
                continue
            halved = -(-along[axis] // 2)
            grown = three(g * 2 if a == axis else g for a, g in enumerate(group))
            groups = math.prod(halved if a == axis else n for a, n in enumerate(along))
            if groups >= least and fits(grown):
                choices.append(((along[axis] - halved) / counts[axis], -axis, axis))
        if not choices:
            return three(group)
        group[max(choices)[2]] *= 2
