"""A job's fingerprint: its source's identity and everything that shapes its output bytes.

Two runs with the same fingerprint write the same shards, so a resumed run may keep what an
earlier run of the same job proved it wrote; a run with another fingerprint is refused
(resume) or replaces the old dataset (overwrite). The fingerprint holds the output's
metadata documents (geometry, encodings, sharding: `info` / `zarr.json`) and the options that
change bytes without appearing there (jpeg quality, compression level, pyramid reduction),
never credentials or options that only change how the work is done (memory budget, engine,
scheduler).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from shardwright import downsample
from shardwright.sources import Source
from shardwright.urls import scheme_of, split_hdf5

Fingerprint = dict[str, Any]


def normalized_url(url: str) -> str:
    """Local paths as their real absolute path (a resume from another directory names the
    same file); URLs as given, without a trailing slash."""
    if scheme_of(url) not in ("", "file"):
        return url.rstrip("/")
    path = url.removeprefix("file://")
    head, dataset = split_hdf5(path) or (path, None)
    return os.path.realpath(head) + ("" if dataset is None else f"#{dataset}")


def source_fingerprint(source: Source) -> Fingerprint:
    identity = getattr(source, "identity", None)
    return {
        "kind": type(source).__name__,
        "url": normalized_url(source.url),
        "shape_xyz": [int(s) for s in source.shape_xyz],
        "channels": int(source.num_channels),
        "dtype": str(source.dtype),
        "axes": source.axes,
        # A source without an identity (a user's own Source object) is known by the rest.
        "identity": identity() if callable(identity) else None,
    }


def volume_fingerprint(plan: Any) -> Fingerprint:
    """Of a ConversionPlan (one dataset: every level of a pyramid, not its companions)."""
    options = plan.options
    encoding = {
        "compression_level": options.compression_level,
        "jpeg_quality": options.jpeg_quality if plan.layout.encodes_jpeg else None,
        "downsample": plan.pyramid.method if plan.pyramid is not None else None,
        "downsample_rules": downsample.RULES if plan.pyramid is not None else None,
    }
    return {
        "source": source_fingerprint(plan.source),
        "output": _json(dict(plan.metadata_documents())),
        "encoding": encoding,
    }


def objects_fingerprint(plan: Any) -> Fingerprint:
    """Of an ObjectPlan: the mesh or skeleton directory as its one listing saw it."""
    source_info = json.dumps(plan.source_info, sort_keys=True).encode()
    return {
        "source": {
            "kind": plan.kind,
            "url": normalized_url(plan.source),
            "info_sha256": hashlib.sha256(source_info).hexdigest(),
            "objects": plan.source_objects,
            "bytes": plan.source_bytes,
            "segments": plan.object_count,
        },
        "output": _json(dict(plan.metadata_documents())),
        "encoding": {
            "compression_level": plan.options.compression_level,
            "legacy_to_multires": plan.options.legacy_to_multires,
        },
    }


def generated_fingerprint(plan: Any) -> Fingerprint:
    """Of a GeneratedPlan: the volume's source and everything that shapes the objects."""
    return {
        "source": source_fingerprint(plan.source),
        "output": _json(dict(plan.metadata_documents())),
        "generation": _json(plan.describe()),
    }


def digest(fingerprint: Fingerprint) -> str:
    """A short, stable name of a fingerprint (what receipts and leases record)."""
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def differences(old: Any, new: Any, limit: int = 4) -> list[str]:
    """What differs between two fingerprints, as `path: old -> new` lines, the broadest first
    (the source's URL before its file's change time; at most `limit`, then how many more)."""
    found: list[str] = []
    _compare(old, new, "", found)
    found.sort(key=lambda line: line.split(":", 1)[0].count("."))
    if len(found) > limit:
        found = [*found[:limit], f"... and {len(found) - limit} more"]
    return found


def _compare(old: Any, new: Any, path: str, found: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _compare(old.get(key), new.get(key), f"{path}.{key}" if path else str(key), found)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _compare(a, b, f"{path}[{i}]", found)
    elif old != new:
        found.append(f"{path}: {_short(old)} -> {_short(new)}")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


def _json(value: Any) -> Any:
    """As it reads back from JSON (tuples become lists), so recorded and fresh compare."""
    return json.loads(json.dumps(value))
