"""Skeletons: TEASAR (kimimaro, with invalidation.py's faster invalidation and distance.py's
faster distance field) per block, joined across blocks (generation/joining.py), or traced
whole where the segment is thick and its box fits a task's memory.

A block traces the segments of its core in one pass over its read box. Of a segment that
reaches a face the block shares with a neighbour it also hands over its voxels there
(`block_masks`, in the block's spool). The output shard's task then traces such a segment
whole from its pieces' voxels where `Tracing.traces_whole` says so (its box has at most
`whole_pass_voxels` voxels and the segment fills at least 1 / SPARSEST of it): as one TEASAR
pass over the volume would (the same voxels, the same border targets at the dataset's edges),
whatever the block size; a cell body cut into blocks otherwise grows a branch from every face
it crosses. A thin segment (a neurite: tracing its box whole would cost many times its
voxels) and one too large keep the blocks' pieces, joined. A block does not trace a part
that is blob-like, as a cell body's is (`left_to_the_shard`), which the shard's task would
trace whole: it traces the segment whole, or, where the whole segment does not pass, traces
that part from the handed-over voxels bit for bit as its block would have
(`_traced_as_its_block`), so that a cell body's blocks do not trace it for nothing.
A segment TEASAR leaves no edge in (one voxel, say) gets one edge across its box, so that
every segment has a skeleton to show; branches shorter than the tick threshold are removed
last, as Igneous's merge removes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.common.boxes import intersect, within
from shardwright.formats.precomputed.skeletons import encode_skeleton
from shardwright.generation import census, distance, invalidation, joining
from shardwright.generation.census import Box, Triple
from shardwright.generation.exchange import Mask, Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.options import TEASAR_DEFAULTS

RADIUS_ATTRIBUTE = {"id": "radius", "data_type": "float32", "num_components": 1}
# A segment filling less than 1 / SPARSEST of its box keeps the blocks' pieces (Tracing).
SPARSEST = 16
# A block leaves to the shard's task a large blob-like part: of at least LEFT_FEWEST voxels,
# filling at least 1 / LEFT_SPARSEST of its box, no side of which (nm) is over LEFT_ELONGATION
# times another. A part left costs tens of milliseconds more to trace than within its block
# where its segment is not traced whole, as a neurite's rarely is.
LEFT_FEWEST = 10_000
LEFT_SPARSEST = 3
LEFT_ELONGATION = 3.0
Skeleton = joining.Skeleton
# A block's skeleton of a segment it traced nothing of (vertices, edges, radii; empty arrays,
# so one value serves every piece).
NO_SKELETON = (np.zeros((0, 3), np.float32), np.zeros((0, 2), np.uint32), np.zeros(0, np.float32))


@dataclass(frozen=True)
class Tracing:
    """How a job traces skeletons: TEASAR's parameters (kimimaro's names), the branches
    removed after joining (`tick_threshold` nm, 0: none) and the most voxels a box traced
    whole may have (`MemoryBudget.traced_voxels`)."""

    teasar: tuple[tuple[str, float], ...] = tuple(TEASAR_DEFAULTS.items())
    tick_threshold: float = 0.0
    whole_pass_voxels: int = 0

    def params(self) -> dict[str, Any]:
        """kimimaro's `teasar_params`: the tuned ones, the penalty field's as Igneous's."""
        return {**dict(self.teasar), "pdrf_scale": 100000, "pdrf_exponent": 4, "max_paths": None}

    def traces_whole(self, voxels: int, shape: Sequence[int] | np.ndarray) -> bool:
        """Whether a segment of `voxels` in a box of `shape` is traced whole: where the box
        fits the memory budget and the segment fills at least 1 / SPARSEST of it (tracing
        costs its box's voxels; the blocks have traced a thin one, such as a neurite, about
        as one pass would, where a thick one grows a branch from every face it crosses)."""
        size = int(np.prod(shape))
        return size <= self.whole_pass_voxels and size <= SPARSEST * voxels


def block_skeletons(
    labels: np.ndarray, grid: BlockGrid, wanted: Iterable[int], tracing: Tracing
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each wanted segment's skeleton in one block: (vertices [n, 3] float32 nm from the block's
    origin, edges [m, 2] uint32, radii [n] float32 nm)."""
    ids = sorted(set(wanted))
    if not ids:
        return {}
    found = _teasar(labels, grid.resolution, tracing, object_ids=ids)
    out = {}
    for segment, skeleton in found.items():
        if len(skeleton.vertices):
            out[int(segment)] = (
                np.asarray(skeleton.vertices, np.float32),
                np.asarray(skeleton.edges, np.uint32).reshape(-1, 2),
                np.asarray(skeleton.radii, np.float32),
            )
    return out


def _teasar(
    labels: np.ndarray,
    resolution: Sequence[float],
    tracing: Tracing,
    object_ids: list[int] | None = None,
    fix_borders: bool = True,
) -> dict[int, Any]:
    """kimimaro's skeletons of `labels` as the job traces: its TEASAR parameters, every
    segment kept (no dust threshold), branches fixed, in this process with invalidation.py's
    flood and distance.py's field (`fix_borders`: border targets on the array's faces)."""
    import kimimaro

    invalidation.install()
    distance.install()
    found: dict[int, Any] = kimimaro.skeletonize(
        np.asfortranarray(labels), teasar_params=tracing.params(), anisotropy=tuple(resolution),
        object_ids=object_ids, dust_threshold=0, fix_branching=True, fix_borders=fix_borders,
        progress=False, parallel=1,
    )  # fmt: skip
    return found


def reaching_segments(labels: np.ndarray, grid: BlockGrid, position: Triple) -> set[int]:
    """The segments with voxels on a face the block's read box `labels` shares with a
    neighbouring block (the segment goes on there, or may)."""
    low_edge, high_edge = grid.dataset_edges(position)
    planes = []
    for axis in range(3):
        along = np.moveaxis(labels, axis, 0)
        if not low_edge[axis]:
            planes.append(along[0].ravel())
        if not high_edge[axis]:
            planes.append(along[-1].ravel())
    if not planes:
        return set()
    return set(np.unique(np.concatenate(planes)).tolist()) - {0}


def left_to_the_shard(
    counted: Mapping[int, tuple[int, Box]],
    reaching: Iterable[int],
    resolution: Sequence[float],
    tracing: Tracing,
) -> set[int]:
    """The segments reaching past a block's faces whose part in its core (`counted`: the
    census's voxels and box; `resolution` nm) is large and blob-like, as a cell body's is:
    the block hands them over untraced, since the output shard's task traces such a segment
    whole, which would make the block's trace of it wasted work (and traces the part as the
    block would have where the segment is not traced whole)."""
    left = set()
    for segment in reaching:
        voxels, (low, high) = counted[segment]
        shape = np.subtract(high, low)
        sides = shape * np.asarray(resolution)
        if (voxels >= LEFT_FEWEST and np.prod(shape) <= LEFT_SPARSEST * voxels
                and sides.max() <= LEFT_ELONGATION * sides.min()
                and tracing.traces_whole(voxels, shape)):  # fmt: skip
            left.add(segment)
    return left


def block_masks(core: np.ndarray, start: Triple, boxes: dict[int, Box]) -> dict[int, Mask]:
    """Each segment's voxels in the block's core `core` (first voxel `start`), in its box there
    (the census's). A segment's cores together hold all its voxels: every voxel of it that
    another block's read box reaches lies in the first layer of its own block's core, which
    then hands it over too."""
    return {
        segment: Mask.of(core[within(box, start)] == segment, box[0])
        for segment, box in boxes.items()
    }


def trace_cutout(voxels: np.ndarray, low: Triple, edges: tuple[Triple, Triple],
                 resolution: Sequence[float], tracing: Tracing) -> Skeleton:  # fmt: skip
    """TEASAR of one segment's `voxels` (bool, first voxel `low`, `resolution` nm): (vertices
    as voxel positions [n, 3] int64, edges, radii nm), as one pass over the whole box `edges`
    (low, high: the dataset) traces it: where the voxels end at its side, the segment meets
    that side (kimimaro places a border target there); elsewhere a layer of background is put
    around them, as the box around would have it. The job's whole passes and `verify
    --full`'s measure of them both trace here."""
    high = [a + n for a, n in zip(low, voxels.shape, strict=True)]
    before = [int(a > e) for a, e in zip(low, edges[0], strict=True)]
    after = [int(b < e) for b, e in zip(high, edges[1], strict=True)]
    padded = np.pad(voxels.astype(np.uint8), list(zip(before, after, strict=True)))
    # Border targets lie on the faces the segment meets; with background on every side there
    # are none to find, and finding them costs six planes' labels and distance transforms.
    at_an_edge = not (all(before) and all(after))
    found = _teasar(padded, resolution, tracing, fix_borders=at_an_edge)
    skeleton = found.get(1)
    if skeleton is None or not len(skeleton.vertices):
        return np.zeros((0, 3), np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    at = np.rint(np.asarray(skeleton.vertices, np.float64) / np.asarray(resolution))
    origin = np.asarray(low) - np.asarray(before)
    return (
        at.astype(np.int64) + origin,
        np.asarray(skeleton.edges, np.int64).reshape(-1, 2),
        np.asarray(skeleton.radii, np.float32),
    )


def joined_skeleton(pieces: Sequence[Piece], grid: BlockGrid, box: Box, tracing: Tracing) -> bytes:
    """One segment's encoded skeleton (vertices in nm, `radius` attribute) from its pieces:
    the parts its blocks handed over as voxels traced whole where `tracing.traces_whole` them,
    else the blocks' pieces joined; then its branches shorter than the tick threshold
    removed; `box`: the segment's (low, high) voxels, for one that TEASAR left no edge in."""
    masked = [piece for piece in pieces if piece.mask is not None]
    parts = []
    if masked:  # a piece's mask is its voxels in its box in the block's core
        voxels, (low, high) = census.joined((p.voxels, p.box) for p in masked)
        if tracing.traces_whole(voxels, np.subtract(high, low)):
            parts.append(_whole(masked, low, high, grid, tracing))
            pieces = [piece for piece in pieces if piece.mask is None]
    pieces = [p if p.traced else _traced_as_its_block(p, masked, grid, tracing) for p in pieces]
    parts.append(joining.joined(pieces, grid, tracing.params()))
    points, links, radius = _concatenated(parts)
    if tracing.tick_threshold and len(links):
        points, links, radius = _without_ticks((points, links, radius), tracing.tick_threshold)
    if not len(links):
        points, links, radius = _across(box, grid)
    return encode_skeleton(points.astype(np.float32), links.astype(np.uint32), [radius])


def _whole(
    masked: Sequence[Piece], low: Triple, high: Triple, grid: BlockGrid, tracing: Tracing
) -> Skeleton:
    """The segment's voxels the blocks handed over, put together and traced as one."""
    voxels = _voxels_in((low, high), masked)
    at, edges, radii = trace_cutout(voxels, low, ((0, 0, 0), grid.shape), grid.resolution,
                                    tracing)  # fmt: skip
    points = np.asarray(grid.origin_nm) + at * np.asarray(grid.resolution)
    return points, edges, radii


def _voxels_in(box: Box, masked: Sequence[Piece]) -> np.ndarray:
    """A segment's voxels in `box` (bool), put together from the handed-over masks that
    reach into it (each its voxels in a block's core)."""
    voxels = np.zeros(np.subtract(box[1], box[0]), bool)
    for piece in masked:
        assert piece.mask is not None
        shared = intersect((piece.mask.low, piece.mask.high), box)
        if shared is not None:
            voxels[within(shared, box[0])] |= piece.mask.voxels()[within(shared, piece.mask.low)]
    return voxels


def _traced_as_its_block(
    piece: Piece, masked: Sequence[Piece], grid: BlockGrid, tracing: Tracing
) -> Piece:
    """A piece its block left untraced, traced as the block would have traced it: the
    segment's voxels in the block's read box, put together from the masks that reach into it
    (its own core's, its neighbours' first layers), at the same places in the array (which
    border target kimimaro takes as the root depends on them), the array ending a layer past
    the segment where the read box goes on, unless that moves a border target: then the read
    box's whole shape (`_same_border_targets`)."""
    voxels = _voxels_in(grid.read_box(piece.block), masked)
    ends = [int(np.flatnonzero(voxels.any(axis=tuple(a for a in range(3) if a != axis)))[-1])
            for axis in range(3)]  # fmt: skip
    x, y, z = (min(end + 2, n) for end, n in zip(ends, voxels.shape, strict=True))
    cropped = voxels[:x, :y, :z]
    if not _same_border_targets(voxels, cropped, grid.resolution):
        cropped = voxels
    traced = block_skeletons(cropped.view(np.uint8), grid, [1], tracing)
    vertices, edges, radii = traced.get(1, NO_SKELETON)
    return dataclasses.replace(piece, vertices=vertices, links=edges, radii=radii, traced=True)


def _same_border_targets(
    whole: np.ndarray, cropped: np.ndarray, resolution: Sequence[float]
) -> bool:
    """Whether kimimaro places the same border targets on the faces of `cropped` (`whole`
    less layers past the segment at its high sides) as on `whole`'s: it breaks a tie between
    a face's widest points by their distance to the face's centre, so a cropped face may
    choose another voxel, which the neighbouring block would not share."""
    from kimimaro.intake import compute_border_targets

    anisotropy = np.asarray(resolution, np.float32)
    targets = [compute_border_targets(np.asfortranarray(a.view(np.uint8)), anisotropy)
               for a in (whole, cropped)]  # fmt: skip
    placed = [{tuple(t) for t in np.asarray(one[1]).reshape(-1, 3).tolist()} for one in targets]
    return placed[0] == placed[1]


def _concatenated(parts: Sequence[Skeleton]) -> Skeleton:
    """Skeletons as one (their vertices numbered on)."""
    offsets = np.cumsum([0, *(len(p[0]) for p in parts)])
    return (
        np.concatenate([p[0].astype(np.float64).reshape(-1, 3) for p in parts]),
        np.concatenate([p[1].reshape(-1, 2) + o for p, o in zip(parts, offsets, strict=False)]),
        np.concatenate([p[2].astype(np.float32) for p in parts]),
    )


def _without_ticks(skeleton: Skeleton, threshold: float) -> Skeleton:
    """The skeleton less its branches shorter than `threshold` nm, shortest first
    (kimimaro's `remove_ticks`, as Igneous's merge runs it)."""
    import osteoid
    from kimimaro.post import remove_ticks

    points, links, radius = skeleton
    kept = remove_ticks(osteoid.Skeleton(points.astype(np.float32), links.astype(np.uint32),
                                         radius), threshold).consolidate()  # fmt: skip
    return (np.asarray(kept.vertices, np.float64), np.asarray(kept.edges, np.int64).reshape(-1, 2),
            np.asarray(kept.radius, np.float32))  # fmt: skip


def _across(box: Box, grid: BlockGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One edge across the box, between the centres of its first and last voxels (of one
    voxel: across it, along its longest side), radius half the smallest voxel side."""
    resolution = np.asarray(grid.resolution, np.float64)
    low, high = (np.asarray(grid.origin_nm) + np.asarray(v) * resolution
                 for v in (box[0], np.asarray(box[1]) - 1))  # fmt: skip
    if np.array_equal(low, high):
        half = np.where(np.arange(3) == np.argmax(resolution), resolution / 2, 0)
        low, high = low - half, high + half
    radius = np.full(2, resolution.min() / 2, np.float32)
    return np.stack([low, high]), np.array([[0, 1]], np.int64), radius
