"""One task's memory (`--memory-budget`), divided by name among what a task holds: each share
is said here, once, and the planners ask for it by name (`ConvertOptions.budget`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Bytes of memory TEASAR takes per voxel of the box it traces (kimimaro: the mask, its
# components, the distance to the boundary, the penalty field, the path search).
TRACE_BYTES_PER_VOXEL = 32
REDUCE_SLAB_MAX = 2 * 1024**2  # cache-sized slabs reduce fastest


@dataclass(frozen=True)
class MemoryBudget:
    """The bytes one task may hold (`total`), and each share of them."""

    total: int

    def spool(self, *, pyramid: bool = False) -> int:
        """Encoded bytes a shard task keeps before spilling to local disk: half, a quarter in
        a pyramid (whose tasks also hold reduced output)."""
        return self.total // (4 if pyramid else 2)

    def epoch(self, *, pyramid: bool) -> int:
        """Raw bytes of one epoch of source chunks: a quarter, an eighth in a pyramid."""
        return self.total // (8 if pyramid else 4)

    def level_region(self, step: Sequence[int] | None) -> int:
        """Raw bytes of a pyramid task's region: a base task's, whose output reduced by `step`
        it hands up, fits a quarter; an upper-level task's (`step` None: held twice, its
        inputs and the assembled region) an eighth."""
        if step is None:
            return self.total // 8
        return math.prod(step) * self.total // 4

    def handed_up(self) -> int:
        """The most a level's shard may hand to the next level, or hold to keep downsampling
        blocks whole: half."""
        return self.total // 2

    def reduction_slab(self) -> int:
        """The slab a reduction works on: 1/32, at most 2 MiB (mode sorts a copy of it)."""
        return min(self.total // 32, REDUCE_SLAB_MAX)

    def rows(self) -> int:
        """A shard's rows, of an annotation or a batch of source objects: an eighth (a task
        holds them several times over: as sent, sorted, packed)."""
        return self.total // 8

    def traced_voxels(self) -> int:
        """The most voxels a box traced whole (a skeleton's) may have: TEASAR on it takes at
        most half (the shard task holds its pieces and its shard beside it)."""
        return self.total // (2 * TRACE_BYTES_PER_VOXEL)
