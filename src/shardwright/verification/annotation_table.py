"""Annotations against their table (`verify DEST --against TABLE`): every entry of every index
equal to what the table's rows make of it.

The layout the job wrote with is read back from the dataset (its info: schema, bounds,
levels, shardings; its manifest's plan: the levels' chances, which column each relationship
came from). Each partition of the table is then turned into the rows each index's shards
hold, exactly as a partition task does (engine/annotation_rows.py), and kept in a local
temporary folder; shard by shard, the entries those rows make are compared, key by key and
byte by byte, with the stored shard's. A row changed, missing or added since the conversion,
or an index that lost or gained an entry, is a problem naming the index, the shard and the
key. Memory is one partition, then one shard, as in the job.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from shardwright.engine.annotation_rows import partition_sections, shard_entries
from shardwright.errors import FormatError, SourceError
from shardwright.formats.precomputed import annotation_spatial as spatial
from shardwright.formats.precomputed.annotations import KINDS, schema_of_info
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.shardfile import write_pieces
from shardwright.generation import exchange
from shardwright.lifecycle.manifest import Manifest
from shardwright.planning.annotations import AnnotationLayout
from shardwright.sources.tables import AnnotationColumns
from shardwright.sources.tables_open import open_table
from shardwright.sources.tables_values import is_textual
from shardwright.stores import Store
from shardwright.verification.report import VerifyReport

SHOWN_PER_SHARD = 3  # differing keys named per shard before the rest are counted


def compare_with_table(
    report: VerifyReport, store: Store, manifest: Manifest, info: dict[str, Any], table: Any,
    storage_options: dict[str, Any] | None,
) -> None:  # fmt: skip
    """Every index entry of the dataset against `table` (a path or URL, or a DataFrame)."""
    where = table if isinstance(table, str) else "the table"
    try:
        ids = ("id", *(str(column) for column in manifest.plan["relationships"].values()))
        opened = open_table(table, storage_options, ids)
        layout = _layout(manifest.plan, info, dict(opened.frame.dtypes.items()))
    except (SourceError, FormatError, KeyError, TypeError, ValueError) as exc:
        report.problems.append(f"{where}: cannot be compared: {exc}")
        return
    stored: dict[tuple[int, int], str] = {}
    folders = {layout.key(output): output for output in range(len(layout.shardings))}
    for entry in manifest.shards:
        folder, _, name = entry.key.rpartition("/")
        if folder in folders:
            stored[(folders[folder], int(name.removesuffix(".shard"), 16))] = entry.key
    with tempfile.TemporaryDirectory(prefix="shardwright-verify-") as scratch:
        try:
            expected, rows = _expected_rows(layout, opened.pieces, Path(scratch))
        except (SourceError, FormatError, KeyError, TypeError, ValueError) as exc:
            report.problems.append(f"{where}: cannot be read: {exc}")
            return
        for output, shard in sorted(set(expected) | set(stored)):
            _compare_shard(report, store, layout, output, shard, expected.get((output, shard), []),
                           stored.get((output, shard)))  # fmt: skip
    report.notes.append(f"every entry of every index compared with the {rows:,} rows of {where}")


def _layout(plan: dict[str, Any], info: dict[str, Any], dtypes: dict[str, Any]) -> AnnotationLayout:
    """The layout the job wrote with, from the dataset's info and its manifest's plan."""
    schema = schema_of_info(info)
    kind = plan["annotation_type"]
    relationships = tuple((str(n), str(c)) for n, c in plan["relationships"].items())
    for column in [*KINDS[kind][1], *(c for _, c in relationships),
                   *(p.id for p in schema.properties)]:  # fmt: skip
        if column not in dtypes:
            raise SourceError(f"no column {column!r}, which the dataset was made from")
    columns = AnnotationColumns(
        kind=kind,
        geometry=KINDS[kind][1],
        id="id" if "id" in dtypes else None,
        relationships=relationships,
        properties=tuple((p.id, p) for p in schema.properties),
        texts=tuple(p.id for p in schema.properties if p.enum_labels and is_textual(dtypes[p.id])),
        fills=tuple((str(c), str(v)) for c, v in (plan.get("property_fills") or {}).items()),
    )
    indexes = [info["by_id"], *info["relationships"], *info["spatial"]]
    levels = tuple(spatial.SpatialLevel(tuple(level["grid_shape"]), tuple(level["chunk_size"]))
                   for level in info["spatial"])  # fmt: skip
    return AnnotationLayout(
        schema, columns, tuple(info["lower_bound"]), levels, tuple(plan["chances"]),
        tuple(ShardingSpec.from_json(index["sharding"]) for index in indexes),
    )  # fmt: skip


def _expected_rows(
    layout: AnnotationLayout, pieces: tuple[Any, ...], scratch: Path
) -> tuple[dict[tuple[int, int], list[tuple[Path, int, int]]], int]:
    """Each partition's rows for every (output, shard), kept in one file per partition:
    where each shard's sections lie, and the table's rows."""
    sections: dict[tuple[int, int], list[tuple[Path, int, int]]] = defaultdict(list)
    first = 0
    for number, piece in enumerate(pieces):
        rows = piece.compute(scheduler="sync")
        parts, index = exchange.spool(partition_sections(layout, rows, first))
        path = scratch / f"{number:06d}"
        with path.open("wb") as out:
            write_pieces(parts, out)
        for output, shard, start, stop in index.tolist():
            sections[(int(output), int(shard))].append((path, int(start), int(stop)))
        first += len(rows)
    return sections, first


def _compare_shard(
    report: VerifyReport, store: Store, layout: AnnotationLayout, output: int, shard: int,
    sections: list[tuple[Path, int, int]], key: str | None,
) -> None:  # fmt: skip
    """One shard's entries against those the table's rows make."""
    spec = layout.shardings[output]
    name = f"{layout.key(output)}/{spec.shard_filename(shard)}"
    parts = []
    for path, start, stop in sections:
        with path.open("rb") as spool:
            spool.seek(start)
            parts.append(spool.read(stop - start))
    keys, sizes, data = shard_entries(layout, output, parts)
    ends = np.cumsum(sizes).tolist()
    wanted = {int(k): data[e - s : e].tobytes()
              for k, e, s in zip(keys.tolist(), ends, sizes.tolist(), strict=True)}  # fmt: skip
    try:
        found = {} if key is None else spec.decode_shard(store.read(key))
    except (FormatError, ValueError, OSError) as exc:
        report.problems.append(f"{name}: does not decode ({exc})")
        return
    what = "annotation" if output == 0 else "cell" if output >= layout.first_spatial else "segment"
    differ = [
        *(f"{what} {k} is not in the table" for k in sorted(found.keys() - wanted.keys())),
        *(f"{what} {k} of the table is missing" for k in sorted(wanted.keys() - found.keys())),
        *(f"{what} {k} differs from the table" for k in sorted(wanted.keys() & found.keys())
          if wanted[k] != bytes(found[k])),
    ]  # fmt: skip
    report.chunks_compared += len(wanted.keys() & found.keys())
    if differ:
        shown = "; ".join(differ[:SHOWN_PER_SHARD])
        extra = len(differ) - SHOWN_PER_SHARD
        more = f" (and {extra:,} more)" if extra > 0 else ""
        report.problems.append(f"{name}: {shown}{more}")
