"""Generated meshes and skeletons: the block tasks and the output-shard tasks.

A block task reads its block of the level meshed once (reducing it from the base with the
pyramid's method where that level is above it), makes the surfaces and / or skeletons of
the segments in it, and writes one spool object under the first output's
`.shardwright/exchange/` (generation/exchange.py), journaled like a shard so that a resumed
job keeps it. Every segment of the block's core has a piece there (its voxels and box,
geometry or none), and a surface piece also goes to each segment found only in the block's
one-voxel overlap: the surface there, between the two blocks' voxels, is this block's to
make. An output-shard task reads its ranges of every block's spool, joins each segment's
pieces (levels of detail, or one skeleton), skips dust, and writes the shard, after the
census of its segments (generation/census.py) under `.shardwright/census/<job>/`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from shardwright.common.downsample import downsample
from shardwright.common.receipts import Receipt
from shardwright.engine.block_reads import GroupReads
from shardwright.engine.shard_task import run_task
from shardwright.formats.precomputed.sharding import ShardBuilder
from shardwright.formats.shardfile import ShardFile
from shardwright.generation import census, exchange
from shardwright.generation.census import NO_BOX, Box
from shardwright.generation.exchange import MESH, SKELETON, BlockIndex, Piece, SpooledShardTask
from shardwright.generation.surfaces import block_surfaces, multires_mesh
from shardwright.generation.tracing import (
    NO_SKELETON,
    block_masks,
    block_skeletons,
    joined_skeleton,
    left_to_the_shard,
    reaching_segments,
)
from shardwright.lifecycle.journal import CENSUS, EXCHANGE
from shardwright.lifecycle.runs import run_of
from shardwright.planning.generated import (
    SEGMENTATION_METHOD,
    GeneratedPlan,
)
from shardwright.sources import chunk_reuse
from shardwright.stores import Store, open_store

Triple = tuple[int, int, int]
OnRead = Callable[[Triple, np.ndarray], None]
ReadBlock = Callable[[Triple], np.ndarray]  # a block's read box, base voxels [x, y, z, c]


@dataclass(frozen=True)
class BlockDone:
    """A block task's result: its spool's receipt (journaled, counted as progress, not a
    shard of any manifest) and index (for the coordinator's exchange)."""

    receipt: Receipt
    block: BlockIndex


def block_key(plan: GeneratedPlan, position: tuple[int, int, int]) -> str:
    return f"{EXCHANGE}block-{plan.generation.grid.key(position)}"


def run_block(
    plan: GeneratedPlan,
    position: tuple[int, int, int],
    store: Store,
    *,
    resume: bool,
    on_read: OnRead | None = None,
    read: ReadBlock | None = None,
) -> BlockDone:
    """Write (or, resuming, keep a proven) block spool; its receipt and index. `on_read`
    sees the block's core as read (base voxels [x, y, z, c] from their corner), a kept
    spool's too: an addition's levels are reduced from it (engine/pyramid.run_feeding_group).
    `read`: how the block's read box is read (its group's reads), else from the source."""
    key = block_key(plan, position)
    producer = BlockProducer(plan, position, on_read, read)
    kept = None if on_read is None else lambda: on_read(*producer.read_core())
    receipt = run_task(key, store, producer, resume=resume, on_kept=kept)
    index = producer.index if producer.index is not None else read_index(store, key)
    return BlockDone(receipt, BlockIndex(key, index))


def run_block_group(
    plan: GeneratedPlan,
    group: Triple,
    store: Store,
    *,
    resume: bool,
    on_done: Callable[[BlockDone], BlockDone],
    on_read: OnRead | None = None,
) -> list[BlockDone]:
    """A group's blocks, one after the other, each chunk they read fetched once (the source
    keeps those the next blocks read again; the next groups hand over the layer where they
    meet: engine/block_reads.py); `on_done` takes each block's result as it is done (the
    journal), so that a group stopped halfway keeps the spools it wrote."""
    positions = plan.generation.grid.group_blocks(group)
    reads = GroupReads(plan, positions, store)
    with chunk_reuse.reusing_reads(plan.source, reads.source_boxes()):
        reads.hand_over()
        return [
            on_done(run_block(plan, p, store, resume=resume, on_read=on_read, read=reads.read))
            for p in positions
        ]


def read_index(store: Store, key: str) -> np.ndarray:
    """The index of a stored block spool, from its tail (two ranged reads)."""
    size = store.size(key)
    if size is None or size < exchange.TRAILER:
        raise FileNotFoundError(f"block spool {key} is gone or truncated")
    length = exchange.index_size(store.read_range(key, size - exchange.TRAILER, size))
    start = size - exchange.TRAILER - length
    return exchange.parse_index(store.read_range(key, start, size - exchange.TRAILER))


class BlockProducer:
    """One block's pieces, grouped by output and shard, as one spool object."""

    def __init__(
        self,
        plan: GeneratedPlan,
        position: Triple,
        on_read: OnRead | None = None,
        read: ReadBlock | None = None,
    ) -> None:
        self.plan, self.position, self.on_read = plan, position, on_read
        self.read = read
        self.index: np.ndarray | None = None

    def _base_box(self, box: tuple[Triple, Triple]) -> tuple[Triple, Triple]:
        return self.plan.generation.grid.base_box(*box, self.plan.source.shape_xyz)

    def read_core(self) -> tuple[Triple, np.ndarray]:
        """The block's core alone, in base voxels: its corner and voxels [x, y, z, c]."""
        start, stop = self._base_box(self.plan.generation.grid.core(self.position))
        return start, self.plan.source.read(start, stop)

    def labels(self) -> np.ndarray:
        """The block (with its overlap) at the level meshed, [x, y, z]; `on_read` sees its
        core in base voxels."""
        g = self.plan.generation
        if self.read is not None:
            block = self.read(self.position)
        else:
            block = self.plan.source.read(*self._base_box(g.grid.read_box(self.position)))
        if self.on_read is not None:
            core_start, core_stop = self._base_box(g.grid.core(self.position))
            shape = [b - a for a, b in zip(core_start, core_stop, strict=True)]
            self.on_read(core_start, block[: shape[0], : shape[1], : shape[2]])
        for step in g.steps:
            block = downsample(np, block, step, SEGMENTATION_METHOD)
        return np.asarray(block[..., 0])

    def produce(self) -> ShardFile:
        g = self.plan.generation
        labels = self.labels()
        start, stop = g.grid.core(self.position)
        core = labels[: stop[0] - start[0], : stop[1] - start[1], : stop[2] - start[2]]
        counted = {s: c for s, c in census.block_census(core, start).items() if g.wants(s)}
        sections: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        if MESH in g.outputs:
            overlap = [labels[core.shape[0] :], labels[:, core.shape[1] :],
                       labels[:, :, core.shape[2] :]]  # fmt: skip
            found = np.unique(np.concatenate([o.ravel() for o in overlap]))
            meshed = set(counted) | {s for s in found.tolist() if g.wants(s)}
            closed = g.grid.dataset_edges(self.position)
            surfaces = block_surfaces(labels, g.grid, g.max_error, meshed, closed)
            empty = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32))
            for segment, shard in _shards(self.plan, MESH, meshed):
                vertices, faces = surfaces.get(segment, empty)
                voxels, box = counted.get(segment, (0, NO_BOX))
                piece = Piece(segment, voxels, self.position, vertices, faces, None, box)
                sections[(MESH, shard)].append(piece.to_bytes())
        if SKELETON in g.outputs:
            reaching = reaching_segments(labels, g.grid, self.position) & set(counted)
            left = left_to_the_shard(counted, reaching, g.grid.resolution, g.tracing)
            skeletons = block_skeletons(labels, g.grid, set(counted) - left, g.tracing)
            masks = block_masks(core, start, {s: counted[s][1] for s in reaching})
            for segment, shard in _shards(self.plan, SKELETON, counted):
                vertices, edges, radii = skeletons.get(segment, NO_SKELETON)
                voxels, box = counted[segment]
                piece = Piece(segment, voxels, self.position, vertices, edges, radii, box,
                              masks.get(segment), traced=segment not in left)  # fmt: skip
                sections[(SKELETON, shard)].append(piece.to_bytes())
        parts, self.index = exchange.spool(sections)
        key = f"block-{g.grid.key(self.position)}"
        return ShardFile(key, sum(len(p) for p in parts), len(self.index), lambda: parts)


def _shards(plan: GeneratedPlan, output: int, segments: Iterable[int]) -> list[tuple[int, int]]:
    """(segment, shard number) in `output`'s sharding, for each segment, in segment order."""
    ordered = np.array(sorted(segments), np.uint64)
    numbers, _ = plan.generation.shardings[output].locate(ordered)
    return list(zip(ordered.tolist(), numbers.tolist(), strict=True))


def run_generated_shard(
    plan: GeneratedPlan, task: SpooledShardTask, store: Store, *, resume: bool
) -> Receipt:
    """Produce one generated mesh or skeleton shard (or keep a proven one, whose receipt the
    journal kept with its count of segments present)."""
    spools = open_store(plan.generation.exchange, plan.exchange_storage_options)
    producer = GeneratedShardProducer(plan, task, spools, store)
    receipt = run_task(task.key, store, producer, resume=resume, also_counted=[spools])
    if receipt.resumed:
        return receipt
    return dataclasses.replace(receipt, present=producer.present)


def census_key(store: Store, shard_key: str) -> str:
    """Where an output shard's census lies: under the job's own folder, so that verify reads
    this job's tables, and the job's end removes the tables of the jobs it replaced."""
    run = run_of(store)
    job = run.job if run is not None else "unjournaled"
    return f"{CENSUS}{job}/{shard_key}"


class GeneratedShardProducer:
    """The segments of one output shard, joined from the block spools' pieces; their census
    stored in `dest` before the shard (so a shard kept on resume has its census)."""

    def __init__(
        self, plan: GeneratedPlan, task: SpooledShardTask, spools: Store, dest: Store
    ) -> None:
        self.plan, self.task, self.spools, self.dest = plan, task, spools, dest
        self.present = 0

    def pieces(self) -> dict[int, list[Piece]]:
        by_segment: dict[int, list[Piece]] = defaultdict(list)
        for key, start, stop in self.task.ranges:
            for piece in exchange.read_pieces(self.spools.read_range(key, start, stop),
                                              self.plan.output):  # fmt: skip
                by_segment[piece.segment].append(piece)
        return by_segment

    def produce(self) -> ShardFile | None:
        plan, g = self.plan, self.plan.generation
        builder = ShardBuilder(
            plan.sharding,
            self.task.shard_number,
            memory_budget=plan.spool_budget,
            level=plan.compression_level,
        )
        try:
            added, rows = 0, []
            for segment, pieces in sorted(self.pieces().items()):
                voxels, box = census.joined((p.voxels, p.box) for p in pieces)
                if voxels < max(1, g.dust_threshold):
                    continue
                rows.append((segment, voxels, box))
                encoded = _encoded(plan, pieces, box)
                if encoded is not None:
                    builder.add(segment, encoded[0], prefix=encoded[1])
                    added += 1
            self.present = len(rows)
            if rows:
                self.dest.write_object(census_key(self.dest, self.task.key), census.encode(rows))
            if not added:
                builder.close()
                return None
            return builder.finish()
        except BaseException:
            builder.close()
            raise


def _encoded(plan: GeneratedPlan, pieces: Sequence[Piece], box: Box) -> tuple[bytes, bytes] | None:
    """(indexed bytes, bytes stored before them) of one segment; None for a mesh without
    geometry (a skeleton always has an edge, across its box at least)."""
    g = plan.generation
    if plan.output == SKELETON:
        return joined_skeleton(pieces, g.grid, box, g.tracing), b""
    surfaces = [p for p in pieces if len(p.links)]
    return multires_mesh(surfaces, g.grid, g.max_error, g.lods) if surfaces else None
