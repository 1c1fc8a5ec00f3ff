"""Verify precomputed annotations: every shard of every index decodes, and the indexes agree.

Each shard the manifest lists is checked for size and crc32c, then decoded entry by entry:
by_id holds one annotation per id (the table's rows, as the plan counted them), each
relationship index holds, per segment, exactly the annotations whose by_id entry names that
segment (counted per relationship), and the spatial levels together hold every annotation
(points: each exactly once). A shard that does not decode is one problem naming it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from shardwright.errors import FormatError
from shardwright.formats.precomputed.annotations import (
    AnnotationSchema,
    decode_multiple,
    decode_single,
    schema_of_info,
)
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.lifecycle.manifest import Manifest
from shardwright.stores import Store
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import check_shards


def verify_annotations(
    report: VerifyReport, store: Store, manifest: Manifest, info: dict[str, Any]
) -> None:
    report.format = "precomputed annotations"
    check_shards(report, store, manifest, None)
    try:
        schema = schema_of_info(info)
    except (FormatError, ValueError) as exc:
        report.problems.append(f"info: {exc}")
        return
    by_folder: dict[str, list[str]] = {}
    for entry in manifest.shards:
        folder, _, _ = entry.key.rpartition("/")
        by_folder.setdefault(folder, []).append(entry.key)
    rows = manifest.plan.get("rows")
    by_id = info["by_id"]
    named: Counter[str] = Counter()
    count = _each_entry(report, store, by_id, by_folder, lambda data: _single(schema, data, named))
    if rows is not None and count != rows:
        report.problems.append(f"{by_id['key']}: {count:,} annotations, the table has {rows:,}")
    for name, entry in zip(schema.relationships, info.get("relationships", []), strict=True):
        listed = _each_entry(report, store, entry, by_folder, lambda data: _listed(schema, data))
        if listed != named[name]:
            report.problems.append(
                f"{entry['key']}: {listed:,} annotations listed by segment, by_id names "
                f"{named[name]:,} for relationship {name!r}"
            )
    spatial = sum(_each_entry(report, store, level, by_folder, lambda data: _listed(schema, data))
                  for level in info.get("spatial", []))  # fmt: skip
    if schema.kind == "point" and spatial != count:
        report.problems.append(f"spatial index: {spatial:,} points in its cells, by_id {count:,}")
    elif spatial < count:
        report.problems.append(
            f"spatial index: {spatial:,} annotations, fewer than by_id's {count:,}"
        )
    report.objects_checked += count


def _each_entry(
    report: VerifyReport, store: Store, index: dict[str, Any], by_folder: dict[str, list[str]],
    tally: Any,
) -> int:  # fmt: skip
    """Every entry of one index's shards through `tally` (annotations it holds); a shard
    that does not decode is a problem, the others still counted."""
    spec = ShardingSpec.from_json(index["sharding"])
    total = 0
    for key in by_folder.get(index["key"], []):
        try:
            for data in spec.decode_shard(store.read(key)).values():
                total += tally(data)
        except (FormatError, ValueError, OSError) as exc:
            report.problems.append(f"{key}: does not decode ({exc})")
    return total


def _single(schema: AnnotationSchema, data: bytes, named: Counter[str]) -> int:
    _, related = decode_single(schema, data)
    for name, ids in zip(schema.relationships, related, strict=True):
        named[name] += int(np.count_nonzero(ids))
    return 1


def _listed(schema: AnnotationSchema, data: bytes) -> int:
    return int(decode_multiple(schema, data)[1].size)
