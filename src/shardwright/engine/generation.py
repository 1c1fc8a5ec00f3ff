"""Generated meshes and skeletons: the block tasks and the output-shard tasks.

A block task reads its block of the level meshed once (reducing it from the base with the
pyramid's method where that level is above it), makes the surfaces and / or skeletons of
the segments in it, and writes one spool object under the first output's
`.shardwright/exchange/` (generation/exchange.py), journaled like a shard so that a resumed
job keeps it. An output-shard task reads its ranges of every block's spool, joins each
segment's pieces (levels of detail, or one skeleton), skips dust, and writes the shard.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardwright.downsample import downsample
from shardwright.engine.shard_task import run_task
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.sharding import ShardBuilder
from shardwright.generation import exchange
from shardwright.generation.exchange import MESH, SKELETON, BlockIndex, Piece
from shardwright.generation.surfaces import block_surfaces, multires_mesh
from shardwright.generation.tracing import block_skeletons, joined_skeleton
from shardwright.lifecycle.journal import EXCHANGE
from shardwright.manifest import Receipt
from shardwright.planning.generation import (
    SEGMENTATION_METHOD,
    GeneratedPlan,
    GeneratedShardTask,
)
from shardwright.store import Store


@dataclass(frozen=True)
class BlockDone:
    """A block task's result: its spool's receipt (journaled, counted as progress, not a
    shard of any manifest) and index (for the coordinator's exchange)."""

    receipt: Receipt
    block: BlockIndex


def block_key(plan: GeneratedPlan, position: tuple[int, int, int]) -> str:
    return f"{EXCHANGE}block-{plan.generation.grid.key(position)}"


def run_block(
    plan: GeneratedPlan, position: tuple[int, int, int], store: Store, *, resume: bool
) -> BlockDone:
    """Write (or, resuming, keep a proven) block spool; its receipt and index."""
    key = block_key(plan, position)
    producer = BlockProducer(plan, position)
    receipt = run_task(key, store, producer, resume=resume)
    index = producer.index if producer.index is not None else read_index(store, key)
    return BlockDone(receipt, BlockIndex(key, index))


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

    def __init__(self, plan: GeneratedPlan, position: tuple[int, int, int]) -> None:
        self.plan, self.position = plan, position
        self.index: np.ndarray | None = None

    def labels(self) -> np.ndarray:
        """The block (with its overlap) at the level meshed, [x, y, z]."""
        g = self.plan.generation
        grid = g.grid
        base_start, base_stop = grid.base_box(*grid.read_box(self.position),
                                              self.plan.source.shape_xyz)  # fmt: skip
        block = self.plan.source.read(base_start, base_stop)
        for _ in range(g.level):
            block = downsample(np, block, g.step, SEGMENTATION_METHOD)
        return np.asarray(block[..., 0])

    def produce(self) -> ShardFile:
        g = self.plan.generation
        labels = self.labels()
        start, stop = g.grid.core(self.position)
        core = labels[: stop[0] - start[0], : stop[1] - start[1], : stop[2] - start[2]]
        ids, counts = np.unique(core, return_counts=True)
        voxels = {int(i): int(n) for i, n in zip(ids.tolist(), counts.tolist(), strict=True)
                  if g.wants(int(i))}  # fmt: skip
        sections: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        segments = np.array(sorted(voxels), np.uint64)
        if MESH in g.outputs:
            closed = g.grid.dataset_edges(self.position)
            surfaces = block_surfaces(labels, g.grid, g.max_error, voxels, closed)
            empty = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32))
            for segment, shard in _shards(self.plan, MESH, segments):
                vertices, faces = surfaces.get(segment, empty)
                piece = Piece(segment, voxels[segment], self.position, vertices, faces)
                sections[(MESH, shard)].append(piece.to_bytes())
        if SKELETON in g.outputs:
            skeletons = block_skeletons(labels, g.grid, voxels)
            for segment, shard in _shards(self.plan, SKELETON, segments):
                if segment in skeletons:
                    vertices, edges, radii = skeletons[segment]
                    piece = Piece(segment, voxels[segment], self.position, vertices, edges, radii)
                    sections[(SKELETON, shard)].append(piece.to_bytes())
        parts, self.index = exchange.spool(sections)
        key = f"block-{g.grid.key(self.position)}"
        return ShardFile(key, sum(len(p) for p in parts), len(self.index), lambda: parts)


def _shards(plan: GeneratedPlan, output: int, segments: np.ndarray) -> list[tuple[int, int]]:
    """(segment, shard number) in `output`'s sharding, for each segment."""
    numbers, _ = plan.generation.shardings[output].locate(segments)
    return list(zip(segments.tolist(), numbers.tolist(), strict=True))


def run_generated_shard(
    plan: GeneratedPlan, task: GeneratedShardTask, store: Store, *, resume: bool
) -> Receipt:
    """Produce one generated mesh or skeleton shard (or keep a proven one)."""
    spools = Store(plan.generation.exchange, plan.exchange_storage_options)
    producer = GeneratedShardProducer(plan, task, spools)
    return run_task(task.key, store, producer, resume=resume, also_counted=[spools])


class GeneratedShardProducer:
    """The segments of one output shard, joined from the block spools' pieces."""

    def __init__(self, plan: GeneratedPlan, task: GeneratedShardTask, spools: Store) -> None:
        self.plan, self.task, self.spools = plan, task, spools

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
            added = 0
            for segment, pieces in sorted(self.pieces().items()):
                if sum(p.voxels for p in pieces) < g.dust_threshold:
                    continue
                encoded = _encoded(plan, [p for p in pieces if len(p.vertices)])
                if encoded is not None:
                    builder.add(segment, encoded[0], prefix=encoded[1])
                    added += 1
            if not added:
                builder.close()
                return None
            return builder.finish()
        except BaseException:
            builder.close()
            raise


def _encoded(plan: GeneratedPlan, pieces: Sequence[Piece]) -> tuple[bytes, bytes] | None:
    """(indexed bytes, bytes stored before them) of one segment; None without geometry."""
    g = plan.generation
    if not pieces:
        return None
    if plan.output == SKELETON:
        return joined_skeleton(pieces, g.grid), b""
    return multires_mesh(pieces, g.grid, g.max_error, g.lods)
