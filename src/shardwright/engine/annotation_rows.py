"""Annotations between a table's partitions and the indexes' shards.

A partition task turns its rows into records once and sends each row to every index that
holds it: by_id (keyed by the annotation id), each relationship (keyed by the row's segment
id; 0 means none, as segment 0 is background) and the one spatial level the row's draws
chose (keyed by the compressed Morton code of each cell its bounding box meets). Rows go as
fixed-size binary rows, grouped by (output, shard) into the partition's spool object
(generation/exchange.py), so a shard task reads only its own sections. The shard task sorts
its rows by key and encodes each key's entry as the format stores it.

Outputs are numbered: 0 by_id, then one per relationship, then one per spatial level.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from shardwright.errors import FormatError
from shardwright.formats.precomputed import annotation_spatial as spatial
from shardwright.formats.precomputed.annotations import (
    bounding_boxes,
    encode_multiple,
    encode_single,
)
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.planning.annotations import BY_ID, AnnotationLayout


def partition_sections(
    layout: AnnotationLayout, frame: Any, first_row: int
) -> dict[tuple[int, int], list[bytes]]:
    """One partition's rows for every output, as (output, shard) -> sections. `first_row`:
    the partition's first row in the table (ids default to row number + 1)."""
    columns = layout.columns
    rows = len(frame)
    if columns.id is not None:
        ids = np.asarray(frame[columns.id]).astype(np.uint64)
    else:
        ids = np.arange(first_row + 1, first_row + 1 + rows, dtype=np.uint64)
    geometry = np.asarray(frame[list(columns.geometry)], dtype=np.float64)
    values = {
        prop.id: np.asarray(frame[column]).astype(prop.type) for column, prop in columns.properties
    }
    records = layout.schema.records(geometry, values)
    related = [np.asarray(frame[column]).astype(np.uint64) for _, column in columns.relationships]
    sections: dict[tuple[int, int], list[bytes]] = defaultdict(list)

    def send(output: int, keys: np.ndarray, table: np.ndarray) -> None:
        shards, _ = layout.shardings[output].locate(keys)
        order = np.argsort(shards, kind="stable")
        bounds = np.flatnonzero(np.diff(shards[order])) + 1
        for group in np.split(order, bounds) if order.size else []:
            sections[(output, int(shards[group[0]]))].append(table[group].tobytes())

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


def shard_entries(
    layout: AnnotationLayout, output: int, sections: Sequence[bytes | memoryview]
) -> Iterator[tuple[int, bytes]]:
    """(key, encoded entry) for every key of one shard of `output`, in key order, from the
    sections every partition sent it."""
    dtype = layout.row_dtype(output)
    joined = b"".join(sections)
    if len(joined) % dtype.itemsize:
        raise FormatError(f"{layout.key(output)}: a section is truncated")
    rows = np.frombuffer(joined, dtype)
    if output == BY_ID:
        rows = rows[np.argsort(rows["key"], kind="stable")]
        keys = rows["key"]
        repeated = np.flatnonzero(keys[1:] == keys[:-1])
        if repeated.size:
            raise FormatError(f"annotation id {keys[repeated[0]]} is in the table twice")
        for row in rows:
            lists = [[int(s)] if s else [] for s in np.atleast_1d(row["related"]).tolist()]
            yield int(row["key"]), encode_single(row["record"], lists)
        return
    second = rows["id"] if output < layout.first_spatial else rows["order"]
    rows = rows[np.lexsort((second, rows["key"]))]
    bounds = np.flatnonzero(np.diff(rows["key"])) + 1
    for group in np.split(rows, bounds) if rows.size else []:
        yield int(group["key"][0]), encode_multiple(group["record"], group["id"])
