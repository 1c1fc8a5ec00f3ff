"""The spatial index of precomputed annotations: its grids, and which annotations each level
stores, as the format's algorithm says, decided without randomness.

Level 0 is one cell covering the collection's bounds; each finer level halves the cell along
the dimensions whose cells are longest (within a factor of two), so cells stay near
isotropic and each level's cells nest in the coarser ones. At each level, every annotation
not stored at a coarser level is stored there with probability `min(1, limit / maxCount)`,
where maxCount is the most such annotations any one cell of the level holds. The draw is a
hash of the annotation's id and the level (splitmix64), so the same table gives the same
levels on every run and every worker, and the choices of different levels are independent,
as the format's random draws are. An annotation stored at a level is stored in every cell of
that level its bounding box meets, and at no other level.

Levels stop when nothing remains; a level whose cells are under one unit of the coordinate
space along every dimension (points at one position, which no finer grid separates) stores
all that remains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_LEVELS = 32
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class SpatialLevel:
    """One level's grid: cells per dimension and each cell's size (coordinate units)."""

    grid_shape: tuple[int, ...]
    chunk_size: tuple[float, ...]

    @property
    def finest(self) -> bool:
        """Cells under one unit along every dimension: no finer grid separates more."""
        return all(size <= 1.0 for size in self.chunk_size)


def spatial_levels(lower: Sequence[float], upper: Sequence[float]) -> list[SpatialLevel]:
    """Every level a collection with these bounds can have, coarsest first, up to the first
    whose cells are under one unit (or MAX_LEVELS)."""
    extent = np.asarray(upper, np.float64) - np.asarray(lower, np.float64)
    if (extent <= 0).any():
        raise ValueError(f"empty bounds {list(lower)} .. {list(upper)}")
    shape = np.ones(extent.size, np.int64)
    levels = []
    for _ in range(MAX_LEVELS):
        chunk = extent / shape
        levels.append(SpatialLevel(tuple(int(n) for n in shape), tuple(chunk.tolist())))
        if levels[-1].finest:
            break
        shape = np.where(chunk >= chunk.max() / 2, shape * 2, shape)
    return levels


def draws(ids: npt.ArrayLike, level: int) -> npt.NDArray[np.float64]:
    """Each id's uniform draw in [0, 1) at `level` (splitmix64 of the id and the level)."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids, np.uint64) + _GOLDEN * np.uint64(level + 1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def emission_levels(ids: npt.ArrayLike, chances: Sequence[float]) -> npt.NDArray[np.int64]:
    """The level each annotation is stored at: the first whose draw falls under its chance
    (the last level's chance is 1: every annotation is stored somewhere)."""
    values = np.asarray(ids, np.uint64)
    out = np.full(values.size, len(chances) - 1, np.int64)
    open_ = np.ones(values.size, bool)
    for level, chance in enumerate(chances[:-1]):
        chosen = open_ & (draws(values, level) < chance)
        out[chosen] = level
        open_ &= ~chosen
    return out


def remaining(ids: npt.ArrayLike, chances: Sequence[float]) -> npt.NDArray[np.bool_]:
    """Which annotations no level of `chances` (the coarser levels decided so far) stored."""
    values = np.asarray(ids, np.uint64)
    left = np.ones(values.size, bool)
    for level, chance in enumerate(chances):
        left &= draws(values, level) >= chance
    return left


def cell_ranges(
    low: npt.ArrayLike, high: npt.ArrayLike, lower: Sequence[float], level: SpatialLevel
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For annotations whose bounding boxes are [low, high] ([N, rank] each), the first and
    last cell (inclusive) of `level` along each dimension that each box meets."""
    size = np.asarray(level.chunk_size, np.float64)
    top = np.asarray(level.grid_shape, np.int64) - 1
    start = np.floor((np.asarray(low, np.float64) - lower) / size).astype(np.int64)
    stop = np.floor((np.asarray(high, np.float64) - lower) / size).astype(np.int64)
    return np.clip(start, 0, top), np.clip(stop, 0, top)


def cells_met(
    start: npt.NDArray[np.int64], stop: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(annotation index, cell [rank]) for every cell each annotation's range covers."""
    counts = np.prod(stop - start + 1, axis=1)
    owner = np.repeat(np.arange(start.shape[0]), counts)
    if not owner.size:
        return owner, np.zeros((0, start.shape[1]), np.int64)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    offset = np.arange(owner.size) - first  # which of its cells, in C order
    spans = (stop - start + 1)[owner]
    cells = np.empty((owner.size, start.shape[1]), np.int64)
    for dim in range(start.shape[1] - 1, -1, -1):
        cells[:, dim] = start[owner, dim] + offset % spans[:, dim]
        offset //= spans[:, dim]
    return owner, cells


def flat_cells(cells: npt.NDArray[np.int64], level: SpatialLevel) -> npt.NDArray[np.uint64]:
    """A cell's number within its level (C order), for counting annotations per cell."""
    return np.ravel_multi_index(tuple(cells.T), level.grid_shape).astype(np.uint64)


def chance(max_count: int, limit: int, level: SpatialLevel) -> float:
    """A level's chance of storing each annotation that remains (1 at the finest level)."""
    if max_count <= limit or level.finest:
        return 1.0
    return limit / max_count


def remaining_counts(
    ids: npt.ArrayLike,
    low: npt.ArrayLike,
    high: npt.ArrayLike,
    lower: Sequence[float],
    level: SpatialLevel,
    decided: Sequence[float],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Of some annotations (one partition of a table), how many that the coarser levels'
    `decided` chances left over each cell of `level` meets: (cells, counts)."""
    left = remaining(ids, decided)
    start, stop = cell_ranges(np.asarray(low)[left], np.asarray(high)[left], lower, level)
    _, cells = cells_met(start, stop)
    flat, counts = np.unique(flat_cells(cells, level), return_counts=True)
    return flat, counts.astype(np.int64)


def most_in_a_cell(parts: Sequence[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]]) -> int:
    """The largest count of any cell, summed over the partitions' (cells, counts)."""
    if not parts:
        return 0
    cells = np.concatenate([cells for cells, _ in parts])
    if not cells.size:
        return 0
    _, where = np.unique(cells, return_inverse=True)
    totals = np.bincount(where, weights=np.concatenate([counts for _, counts in parts]))
    return int(totals.max())


def decide_chances(
    levels: Sequence[SpatialLevel], limit: int, most: Callable[[int, list[float]], int]
) -> tuple[list[float], list[int]]:
    """Each level's chance, coarsest first, until nothing remains: `most(level, decided)`
    says how many remaining annotations the fullest cell of that level holds (one pass over
    the table per level). The last chance is 1. Also each level's `limit` as its info states
    it, the most annotations a cell of it holds: `limit` where the level samples (about that
    many in its fullest cell), the fullest cell's count where it stores all that remains (a
    level of a few annotations says so, and Neuroglancer, which draws a share of each cell's
    list by its limit, draws them all)."""
    if limit < 1:
        raise ValueError(f"a spatial index limit is at least 1, not {limit}")
    decided: list[float] = []
    fullest: list[int] = []
    for index, level in enumerate(levels):
        fullest.append(most(index, decided))
        if fullest[-1] == 0:
            fullest.pop()
            break
        decided.append(chance(fullest[-1], limit, level))
        if decided[-1] == 1.0:
            break
    if decided:
        decided[-1] = 1.0  # nothing remains past the last level
    limits = [max(1, round(count * share)) for count, share in zip(fullest, decided,
                                                                        strict=True)]  # fmt: skip
    return decided, limits
