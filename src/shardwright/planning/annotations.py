"""Precomputed annotations from a table, planned before any byte is written.

The table is checked (sources/tables.py: columns by name and type, then one pass over its
rows, which keeps each row's id and bounding box on local disk: sources/table_spool.py);
its bounds and `--resolution` make the coordinate space; the spatial index's levels and each
level's chance come from one pass per level over the kept ids and boxes (each partition's
counts per cell, merged in buckets of cells, so no task holds every cell); these
passes run on this process's threads, as a volume's planner samples its source, not on
whatever Dask client the process has as its default (its workers may not reach the table,
and the job may be asked to run elsewhere). Each output (by_id, each relationship, each
spatial level) gets a hashed sharding sized from its rows. The job then runs one task per
partition of the table, which sends its rows to the outputs' shards through one spool object
under DEST/.shardwright/exchange/ (engine/annotation_rows.py), and after a barrier one task
per output shard (engine/annotations.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from shardwright.common.vocabulary import DatasetKind, OutputFormat
from shardwright.errors import NAMED, PlanError
from shardwright.formats.precomputed import annotation_spatial as spatial
from shardwright.formats.precomputed.annotations import AnnotationSchema
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.generation.exchange import SpooledShardTask
from shardwright.options import ConvertOptions
from shardwright.planning import checks
from shardwright.planning.base import ExchangePlan
from shardwright.planning.objects import choose_sharding
from shardwright.planning.text import counted, human_bytes, xyz
from shardwright.sources.table_spool import TableSpool
from shardwright.sources.tables import AnnotationColumns, TableFacts, inspect_table, open_table

STORED_IN = OutputFormat.PRECOMPUTED  # Neuroglancer reads annotations in it alone
BUCKETS = 16  # groups of cells the per-level counts are merged in

BY_ID = 0


@dataclass(frozen=True)
class AnnotationLayout:
    """What the plan decided that every partition and shard task needs: the schema and the
    table's columns, the spatial grid origin, the levels stored and their chances, and each
    output's sharding."""

    schema: AnnotationSchema
    columns: AnnotationColumns
    lower: tuple[float, ...]
    levels: tuple[spatial.SpatialLevel, ...]
    chances: tuple[float, ...]
    shardings: tuple[ShardingSpec, ...]  # by_id, each relationship, each spatial level
    limits: tuple[int, ...] = ()  # each level's most annotations in a cell, as its info says

    @property
    def first_spatial(self) -> int:
        return 1 + len(self.schema.relationships)

    def key(self, output: int) -> str:
        """The output's folder, as the info names it."""
        if output == BY_ID:
            return "by_id"
        if output < self.first_spatial:
            return f"rel_{self.schema.relationships[output - 1]}"
        return f"spatial{output - self.first_spatial}"

    def row_dtype(self, output: int) -> np.dtype:
        """One row as it travels to `output`'s shard tasks."""
        record = self.schema.record_dtype
        if output == BY_ID:
            related = len(self.schema.relationships)
            return np.dtype([("key", "<u8"), ("record", record), ("related", "<u8", (related,))])
        if output < self.first_spatial:
            return np.dtype([("key", "<u8"), ("id", "<u8"), ("record", record)])
        return np.dtype([("key", "<u8"), ("order", "<f8"), ("id", "<u8"), ("record", record)])


@dataclass(frozen=True)
class TablePartition:
    """What one partition task reads: its number, its first row in the table, and the rows
    (a pandas DataFrame, or one partition of a Dask DataFrame, computed by the task)."""

    number: int
    first_row: int
    rows: Any = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"part-{self.number:06d}"


@dataclass(frozen=True)
class AnnotationPlan(ExchangePlan):
    """Everything decided about writing a table's annotations: a `base.Plan`."""

    source: str | None  # None: a DataFrame handed over in Python
    dest: str
    options: ConvertOptions
    facts: TableFacts
    layout: AnnotationLayout
    resolution: tuple[float, float, float]
    upper: tuple[float, ...]
    table: Any = field(default=None, repr=False, compare=False)  # the Dask DataFrame
    pieces: tuple[Any, ...] = field(default=(), repr=False, compare=False)  # its partitions

    dataset: ClassVar[str] = DatasetKind.ANNOTATIONS
    preparing_unit: ClassVar[str] = "partitions"
    in_place: ClassVar[bool] = False
    spools: ClassVar[bool] = True
    holds_gil: ClassVar[bool] = False
    companions: ClassVar[tuple[()]] = ()

    @property
    def source_url(self) -> str | None:
        return self.source

    @property
    def source_bytes(self) -> int:
        """The rows as the partition tasks send them (records and ids)."""
        return self.facts.rows * (self.layout.schema.record_dtype.itemsize + 8)

    @property
    def shard_count(self) -> int:
        """Shards expected: each output's, at most one per key it holds."""
        return sum(min(spec.num_shards, max(1, self.facts.rows)) for spec in self.layout.shardings)

    @property
    def preparing_tasks(self) -> int:
        return len(self.facts.partition_rows)

    @property
    def shard_total(self) -> int:
        """Tasks as progress counts them: the partitions and the shards."""
        return self.preparing_tasks + self.shard_count

    def partitions(self) -> Iterator[TablePartition]:
        first = 0
        for number, (rows, piece) in enumerate(zip(self.facts.partition_rows, self.pieces,
                                                   strict=True)):  # fmt: skip
            yield TablePartition(number, first, piece)
            first += rows

    def shards(self) -> Iterator[SpooledShardTask]:
        """Known only from the partitions' spools: the job asks its exchange (jobs/)."""
        return iter(())

    def for_shard_tasks(self) -> AnnotationPlan:
        return dataclasses.replace(self, table=None, pieces=())

    @property
    def info(self) -> dict[str, Any]:
        layout = self.layout
        entries = [{"key": layout.key(o), "sharding": s.to_json()}
                   for o, s in enumerate(layout.shardings)]  # fmt: skip
        spatial_entries = [
            {**entries[layout.first_spatial + n], "grid_shape": list(level.grid_shape),
             "chunk_size": list(level.chunk_size), "limit": layout.limits[n]}
            for n, level in enumerate(layout.levels)
        ]  # fmt: skip
        return layout.schema.info(self.resolution, layout.lower, self.upper, entries[BY_ID],
                                  entries[1 : layout.first_spatial], spatial_entries)  # fmt: skip

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        return [("info", self.info)]

    def describe(self) -> dict[str, Any]:
        layout = self.layout
        return {
            "source": self.source,
            "destination": self.dest,
            "format": STORED_IN,
            "object_type": "neuroglancer_annotations_v1",
            "annotation_type": layout.schema.kind,
            "rows": self.facts.rows,
            "partitions": len(self.facts.partition_rows),
            "resolution_nm": list(self.resolution),
            "lower_bound": list(layout.lower),
            "upper_bound": list(self.upper),
            "properties": [p.to_json() for p in layout.schema.properties],
            "relationships": dict(layout.columns.relationships),
            "columns": dict(layout.columns.fates()),
            "property_fills": dict(layout.columns.fills),
            "spatial_levels": len(layout.levels),
            "chances": list(layout.chances),
            "limit": self.options.annotation_limit,
            "sharding": {layout.key(o): s.to_json() for o, s in enumerate(layout.shardings)},
            "estimated_bytes": {
                layout.key(o): size
                for o, (_, size) in enumerate(
                    index_sizes(self.facts.rows, layout.schema, layout.chances)
                )
            },  # fmt: skip
            "memory_budget": self.options.memory_budget,
        }

    def report(self) -> str:
        layout, facts = self.layout, self.facts
        schema = layout.schema
        props = ", ".join(f"{p.id} ({p.type})" for p in schema.properties) or "none"
        related = ", ".join(f"{n} <- {c}" for n, c in layout.columns.relationships) or "none"
        sizes = index_sizes(facts.rows, schema, layout.chances)
        shards = ", ".join(f"{layout.key(o)} {spec.num_shards} (~{human_bytes(size[1])})"
                           for o, (spec, size) in enumerate(zip(layout.shardings, sizes,
                                                                strict=True)))  # fmt: skip
        return "\n".join([
            f"source       {self.source or 'a DataFrame'} ({counted(facts.rows, 'row')}, "
            f"{counted(len(facts.partition_rows), 'partition')})",
            f"destination  {self.dest} (neuroglancer_annotations_v1, {schema.kind}, sharded)",
            f"space        {xyz(self.resolution)} nm per unit; bounds {xyz(layout.lower, ',')} .. "
            f"{xyz(self.upper, ',')}",
            f"columns      {'; '.join(f'{c}: {fate}' for c, fate in layout.columns.fates())}",
            f"properties   {props}",
            f"related      {related}",
            f"spatial      {len(layout.levels)} levels, ~{self.options.annotation_limit:,} per "
            "cell; each annotation stored at one level, in every cell it meets",
            f"shards       {shards}: at most so many shards, about so many bytes; rows "
            f"~{human_bytes(self.source_bytes)} through "
            f"{self.dest}/.shardwright/exchange/",
        ])  # fmt: skip


def make_annotation_plan(table: Any, dest: str, options: ConvertOptions) -> AnnotationPlan:
    """Check the table, decide the coordinate space, the levels and the shardings."""
    where = table if isinstance(table, str) else "the table"
    if options.annotation_type is None:
        raise PlanError(
            f"{where} is a table: name the annotations it holds with {{annotation_type}}",
            annotation_type=NAMED,
        )
    if options.resolution is None:
        raise PlanError(
            f"{where}: give the size of one unit of its coordinates with {{resolution}} "
            "(x,y,z in nanometres)",
            resolution=NAMED,
        )
    checks.check_written_in(options, STORED_IN, "annotations are")
    import dask

    ids = ("id", *(column for _, column in options.relationships))
    opened = open_table(table, options.source_storage_options, ids)
    pieces = opened.pieces
    spool = TableSpool(buckets=len(pieces))
    try:
        with dask.config.set(scheduler="threads"):
            facts = inspect_table(opened, options.annotation_type, where, spool,
                                  dict(options.relationships), options.properties,
                                  dict(options.enums))  # fmt: skip
            lower = tuple(math.floor(v) for v in facts.low)
            upper = tuple(math.floor(v) + 1 for v in facts.high)
            levels = spatial.spatial_levels(lower, upper)
            chances, limits = _chances(spool, facts, lower, levels, options.annotation_limit)
    finally:
        spool.close()
    columns = facts.columns
    schema = AnnotationSchema(columns.kind, tuple(p for _, p in columns.properties),
                              tuple(name for name, _ in columns.relationships))  # fmt: skip
    shardings = _shardings(options, facts, schema, chances)
    layout = AnnotationLayout(schema, columns, lower, tuple(levels[: len(chances)]),
                              tuple(chances), shardings, tuple(limits))  # fmt: skip
    rx, ry, rz = (float(r) for r in options.resolution)
    return AnnotationPlan(table if isinstance(table, str) else None, dest, options, facts,
                          layout, (rx, ry, rz), upper, opened.frame, pieces)  # fmt: skip


def _shardings(
    options: ConvertOptions, facts: TableFacts, schema: AnnotationSchema, chances: list[float]
) -> tuple[ShardingSpec, ...]:
    """Each output's hashed sharding, sized from the rows it will hold. A shard task holds
    its shard's rows several times over (as sent, sorted, packed), so a shard's rows stay
    under an eighth of the memory budget. Entries are stored raw unless `--compression gzip`
    is asked: gzip of one annotation of tens of bytes makes it longer, and slow to write."""
    sized = dataclasses.replace(options, target_shard_bytes=min(
        options.target_shard_bytes, options.budget.rows()))  # fmt: skip
    return tuple(choose_sharding(sized, "annotations", entries, nbytes)
                 for entries, nbytes in index_sizes(facts.rows, schema, chances))  # fmt: skip


def index_sizes(
    rows: int, schema: AnnotationSchema, chances: Sequence[float]
) -> list[tuple[int, int]]:
    """(entries, bytes) each output will hold, about: by_id a record and each relationship's
    one segment per row, each relationship (at most) every row, each spatial level the rows
    its chance takes of those left (a point in one cell; larger annotations in more)."""
    record = schema.record_dtype.itemsize
    related = len(schema.relationships)
    sizes = [(rows, rows * (record + 12 * related))]
    sizes += [(rows, rows * (record + 8))] * related
    left = float(rows)
    for chance in chances:
        stored = max(1, math.ceil(left * chance))
        sizes.append((stored, stored * (record + 8)))
        left -= left * chance
    return sizes


def _chances(
    spool: TableSpool, facts: TableFacts, lower: tuple[int, ...],
    levels: list[spatial.SpatialLevel], limit: int,
) -> tuple[list[float], list[int]]:  # fmt: skip
    """Each level's chance and limit, from one pass per level over the ids and boxes the check pass
    left in `spool`."""
    import dask

    rows = facts.partition_rows
    firsts = np.concatenate([[0], np.cumsum(rows)[:-1]]).tolist()
    buckets = min(BUCKETS, len(rows))

    def most(index: int, decided: list[float]) -> int:
        counted = [dask.delayed(_bucketed_counts, nout=buckets)(
            spool, number, first, count, lower, levels[index], decided, buckets)
            for number, (first, count) in enumerate(zip(firsts, rows, strict=True))]  # fmt: skip
        per_bucket = [dask.delayed(spatial.most_in_a_cell)([c[b] for c in counted])
                      for b in range(buckets)]  # fmt: skip
        return max(dask.compute(*per_bucket))

    return spatial.decide_chances(levels, limit, most)


def _bucketed_counts(
    spool: TableSpool, number: int, first_row: int, rows: int, lower: tuple[int, ...],
    level: spatial.SpatialLevel, decided: list[float], buckets: int,
) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """One partition's counts of remaining annotations per cell, split by cell % buckets."""
    low, high = spool.boxes(number)
    ids = spool.ids(number, first_row, rows)
    cells, counts = spatial.remaining_counts(ids, low, high, lower, level, decided)
    bucket = (cells % np.uint64(buckets)).astype(np.int64)
    return [(cells[bucket == b], counts[bucket == b]) for b in range(buckets)]
