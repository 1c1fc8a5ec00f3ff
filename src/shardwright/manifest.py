"""The manifest: the completion record of a conversion, written last by the coordinator.

It lists every shard object (key, size, crc32c, chunk count) and the plan that produced them;
`verify` checks a destination against it, and its absence says a job did not finish.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any

from shardwright import __version__
from shardwright.store import Store

MANIFEST_KEY = "shardwright-manifest.json"


def build_manifest(
    plan_description: dict[str, Any],
    receipts: Iterable[dict[str, Any]],
    seconds: float | None = None,
    coordinator_requests: Iterable[dict[str, int]] = (),
) -> dict[str, Any]:
    """The manifest from the shard receipts; request totals also count the coordinator's
    (preflight probe, metadata), all but the manifest's own single PUT."""
    receipts = list(receipts)
    companions = [r for r in receipts if "companion" in r]  # meshes / skeletons of the job
    receipts = [r for r in receipts if "companion" not in r]
    written = sorted((r for r in receipts if not r["empty"]), key=lambda r: r["key"])
    manifest = {
        "shardwright_version": __version__,
        "format": plan_description["format"],
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "plan": plan_description,
        "totals": {
            "shards": len(written),
            "bytes": sum(r["size"] for r in written),
            "chunks": sum(r["chunks"] for r in written),
            "resumed_shards": sum(1 for r in written if r["resumed"]),
            "empty_shards_skipped": sum(1 for r in receipts if r["empty"]),
            "seconds": None if seconds is None else round(seconds, 3),
            "requests": _sum_requests(
                [*receipts, *({"requests": r} for r in coordinator_requests)]
            ),
        },
        "shards": [
            {"key": r["key"], "size": r["size"], "crc32c": r["crc32c"], "chunks": r["chunks"]}
            for r in written
        ],
    }
    if companions:
        manifest["companions"] = {r["companion"]: r["totals"] for r in companions}
    if any("level" in r for r in receipts):  # a pyramid: what each level wrote
        levels = sorted({r.get("level", 0) for r in receipts})
        manifest["totals"]["levels"] = [
            {
                "level": level,
                "shards": sum(1 for r in written if r.get("level", 0) == level),
                "bytes": sum(r["size"] for r in written if r.get("level", 0) == level),
                "chunks": sum(r["chunks"] for r in written if r.get("level", 0) == level),
            }
            for level in levels
        ]
    return manifest


def _sum_requests(receipts: list[dict[str, Any]]) -> dict[str, int]:
    """Object-store requests (puts, gets, heads) and retries made by all shard tasks."""
    total: dict[str, int] = {}
    for receipt in receipts:
        for kind, n in receipt.get("requests", {}).items():
            total[kind] = total.get(kind, 0) + n
    return total


def write_manifest(store: Store, manifest: dict[str, Any]) -> None:
    store.write_text(MANIFEST_KEY, json.dumps(manifest, indent=1) + "\n")


def read_manifest(store: Store) -> dict[str, Any] | None:
    try:
        return json.loads(store.read(MANIFEST_KEY))
    except FileNotFoundError:
        return None
