"""The manifest: the completion record of a conversion, written last by the coordinator.

It lists every shard object (key, size, crc32c, chunk count), the sha256 of each metadata
object (`info`, `zarr.json`), the job's fingerprint digest and the plan that produced them;
`verify` checks a destination against it, and its absence says a job did not finish. A
manifest read back is validated first: its keys name objects this project may read and, when
it replaces a dataset, delete, so a key that climbs out of the dataset is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import posixpath
from collections.abc import Iterable
from typing import Any

from shardwright.errors import ManifestError
from shardwright.store import Store
from shardwright.version import __version__

MANIFEST_KEY = "shardwright-manifest.json"
FORMATS = ("precomputed", "zarr3")


def metadata_text(document: dict[str, Any]) -> str:
    """A metadata object (`info`, `zarr.json`) exactly as it is stored."""
    return json.dumps(document, indent=1) + "\n"


def metadata_digests(documents: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The sha256 of each stored metadata object, by key (what verify compares)."""
    return {
        key: hashlib.sha256(metadata_text(document).encode()).hexdigest()
        for key, document in documents
    }


def build_manifest(
    plan_description: dict[str, Any],
    receipts: Iterable[dict[str, Any]],
    seconds: float | None = None,
    coordinator_requests: Iterable[dict[str, int]] = (),
    *,
    job: str | None = None,
    metadata: dict[str, str] | None = None,
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
        "job": job,
        "metadata": metadata or {},
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
    """The validated manifest, None when there is none, ManifestError when it is malformed."""
    try:
        text = store.read(MANIFEST_KEY)
    except FileNotFoundError:
        return None
    return parse_manifest(text, f"{store.url}/{MANIFEST_KEY}")


def parse_manifest(text: bytes | str, where: str = MANIFEST_KEY) -> dict[str, Any]:
    """A manifest's JSON, checked for the shape this project writes."""
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{where} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{where} is not a JSON object")
    if manifest.get("format") not in FORMATS:
        raise ManifestError(f"{where}: format {manifest.get('format')!r} is not one of {FORMATS}")
    for field, kind in (("plan", dict), ("totals", dict), ("shards", list)):
        if not isinstance(manifest.get(field), kind):
            raise ManifestError(f"{where}: {field!r} is missing or not a {kind.__name__}")
    for i, shard in enumerate(manifest["shards"]):
        if not isinstance(shard, dict):
            raise ManifestError(f"{where}: shards[{i}] is not an object")
        check_key(shard.get("key"), f"{where}: shards[{i}].key")
        for field, limit in (("size", 2**64), ("crc32c", 2**32), ("chunks", 2**64)):
            value = shard.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
                raise ManifestError(f"{where}: shards[{i}].{field} is {value!r}")
    metadata = manifest.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ManifestError(f"{where}: 'metadata' is not an object")
    for key, digest in metadata.items():
        check_key(key, f"{where}: metadata key")
        if not isinstance(digest, str):
            raise ManifestError(f"{where}: metadata[{key!r}] is not a sha256 string")
    if manifest.get("job") is not None and not isinstance(manifest["job"], str):
        raise ManifestError(f"{where}: 'job' is not a string")
    return manifest


def check_key(key: Any, where: str) -> str:
    """An object key inside the dataset: relative, '/'-separated, no '.' or '..' parts."""
    if not isinstance(key, str) or not key:
        raise ManifestError(f"{where} is {key!r}, not an object key")
    parts = key.split("/")
    if key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(f"{where} {key!r} is not a key inside the dataset")
    if posixpath.normpath(key) != key or ":" in parts[0]:
        raise ManifestError(f"{where} {key!r} is not a key inside the dataset")
    return key


def owned_keys(manifest: dict[str, Any]) -> list[str]:
    """Every object a dataset's manifest says the job stored: shards and metadata (for
    manifests older than the `metadata` field, the metadata its format always has)."""
    keys = [shard["key"] for shard in manifest.get("shards", [])]
    metadata = manifest.get("metadata") or {}
    if metadata:
        return keys + list(metadata)
    if manifest.get("format") == "zarr3":
        levels = manifest.get("plan", {}).get("levels") or []
        return [*keys, "zarr.json", *(f"{row['level']}/zarr.json" for row in levels)]
    return [*keys, "info"]
