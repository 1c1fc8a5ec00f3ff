"""Annotations between a table's partitions and the indexes' shards.

A partition task turns its rows into records once and sends each row to every index that
holds it: by_id (keyed by the annotation id), each relationship (keyed by the row's segment
id; 0 means none, as segment 0 is background) and the one spatial level the row's draws
chose (keyed by the compressed Morton code of each cell its bounding box meets). Rows go as
fixed-size binary rows, grouped by (output, shard) into the partition's spool object
(generation/exchange.py), so a shard task reads only its own sections. The shard task sorts
its rows in the file's order and packs every key's entry, as the format stores it, into one
buffer.

Outputs are numbered: 0 by_id, then one per relationship, then one per spatial level.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardwright.errors import FormatError, SourceError
from shardwright.formats.precomputed import annotation_spatial as spatial
from shardwright.formats.precomputed.annotations import (
    bounding_boxes,
    encode_lists,
    encode_singles,
)
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.planning.annotations import BY_ID, AnnotationLayout
from shardwright.sources.tables_values import as_float, property_values, segment_ids, text_codes


def partition_sections(
    layout: AnnotationLayout, frame: Any, first_row: int
) -> dict[tuple[int, int], list[memoryview]]:
    """One partition's rows for every output, as (output, shard) -> sections. `first_row`:
    the partition's first row in the table (ids default to row number + 1)."""
    columns = layout.columns
    rows = len(frame)
    if columns.id is not None:
        ids = _ids(frame, columns.id)
    else:
        ids = np.arange(first_row + 1, first_row + 1 + rows, dtype=np.uint64)
    geometry = np.stack([as_float(frame[name]) for name in columns.geometry], axis=1)
    fills = dict(columns.fills)
    values = {
        prop.id: text_codes(prop, frame[column]) if column in columns.texts
        else property_values(prop, frame[column], fills.get(column))
        for column, prop in columns.properties
    }  # fmt: skip
    records = layout.schema.records(geometry, values)
    related = [_ids(frame, column) for _, column in columns.relationships]
    sections: dict[tuple[int, int], list[memoryview]] = defaultdict(list)

    def send(output: int, keys: np.ndarray, table: np.ndarray) -> None:
        """The rows ordered by shard once; each shard's section a view of that copy."""
        shards, _ = layout.shardings[output].locate(keys)
        order = np.argsort(shards, kind="stable")
        ordered = memoryview(table[order].view(np.uint8).data)
        present, counts = np.unique(shards[order], return_counts=True)
        ends = np.cumsum(counts) * table.dtype.itemsize
        for shard, end, count in zip(present.tolist(), ends.tolist(), counts.tolist(),
                                     strict=True):  # fmt: skip
            sections[(output, shard)].append(ordered[end - count * table.dtype.itemsize : end])

    by_id = np.zeros(rows, layout.row_dtype(BY_ID))
    by_id["key"], by_id["record"] = ids, records
    if related:
        by_id["related"] = np.stack(related, axis=1)
    send(BY_ID, ids, by_id)
    for offset, segments in enumerate(related):
        output = 1 + offset
        linked = np.flatnonzero(segments)
        table = np.zeros(linked.size, layout.row_dtype(output))
        table["key"], table["id"], table["record"] = segments[linked], ids[linked], records[linked]
        send(output, segments[linked], table)
    low, high = bounding_boxes(layout.schema.kind, geometry)
    stored_at = spatial.emission_levels(ids, layout.chances)
    for index, level in enumerate(layout.levels):
        chosen = np.flatnonzero(stored_at == index)
        start, stop = spatial.cell_ranges(low[chosen], high[chosen], layout.lower, level)
        owner, cells = spatial.cells_met(start, stop)
        members = chosen[owner]
        output = layout.first_spatial + index
        table = np.zeros(members.size, layout.row_dtype(output))
        table["key"] = compressed_morton_code(cells, level.grid_shape)
        table["order"] = spatial.draws(ids[members], len(layout.levels) + index)
        table["id"], table["record"] = ids[members], records[members]
        send(output, table["key"], table)
    return dict(sections)


def _ids(frame: Any, column: str) -> np.ndarray:
    """A column's segment ids, exactly (a missing one is 0: none); a value that is no id
    (the table changed since it was checked) is refused."""
    read = segment_ids(frame[column])
    if read.problem is not None:
        row, what = read.problem
        raise SourceError(f"row {row + 1} of a partition: column {column!r} {what}")
    return read.values


def shard_entries(
    layout: AnnotationLayout, output: int, sections: Sequence[bytes | memoryview]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One shard of `output` from the sections every partition sent it: each key's entry,
    packed in the file's order (minishard, then key) as (keys, sizes, bytes)."""
    dtype = layout.row_dtype(output)
    joined = b"".join(sections)
    if len(joined) % dtype.itemsize:
        raise FormatError(f"{layout.key(output)}: a section is truncated")
    rows = np.frombuffer(joined, dtype)
    _, minishards = layout.shardings[output].locate(rows["key"])
    if output == BY_ID:
        rows = rows[np.lexsort((rows["key"], minishards))]
        keys = rows["key"]
        repeated = np.flatnonzero(keys[1:] == keys[:-1])
        if repeated.size:
            raise FormatError(f"annotation id {keys[repeated[0]]} is in the table twice")
        data, sizes = encode_singles(rows["record"], rows["related"])
        return keys, sizes, data
    second = rows["id"] if output < layout.first_spatial else rows["order"]
    rows = rows[np.lexsort((second, rows["key"], minishards))]
    keys = rows["key"]
    starts = np.ones(keys.size, bool)
    starts[1:] = keys[1:] != keys[:-1]
    firsts = np.flatnonzero(starts)
    data, sizes = encode_lists(rows["record"], rows["id"], np.diff(np.append(firsts, keys.size)))
    return keys[firsts], sizes, data
