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
from collections.abc import Callable
from typing import Any

from shardwright.common import downsample
from shardwright.common.urls import scheme_of, split_hdf5
from shardwright.common.vocabulary import DatasetKind
from shardwright.sources import Source
from shardwright.sources.base import file_identity

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
    """Of a GeneratedPlan: the volume's source and everything that shapes the objects (not
    `fill_missing`: a job stopped by a missing chunk goes on with `--resume --fill-missing`,
    as a volume's does)."""
    described = {k: v for k, v in plan.describe().items() if k != "fill_missing"}
    return {
        "source": source_fingerprint(plan.source),
        "output": _json(dict(plan.metadata_documents())),
        "generation": _json(described),
    }


def addition_fingerprint(plan: Any) -> Fingerprint:
    """Of an AdditionPlan: the scale it reads (the source's identity: not the rest of the
    info, which a person may edit while the job is stopped) and what is added; its
    companions have fingerprints of their own."""
    documents = {key: hashlib.sha256(text).hexdigest() for key, text in plan.documents}
    levels = None if plan.levels is None else volume_fingerprint(plan.levels)
    return {"source": source_fingerprint(plan.source), "adds": dict(plan.names),
            "documents": documents, "levels": levels,
            "replaces": list(plan.replaces)}  # fmt: skip


def annotations_fingerprint(plan: Any) -> Fingerprint:
    """Of an AnnotationPlan: the table (its file as it is now, or a DataFrame's token),
    its rows, and everything that shapes the indexes."""
    source: dict[str, Any] = {"kind": "table", "rows": plan.facts.rows,
                              "partitions": list(plan.facts.partition_rows)}  # fmt: skip
    if plan.source is not None:
        source["url"] = normalized_url(plan.source)
        if os.path.isfile(plan.source):
            source["identity"] = file_identity(plan.source)
    elif plan.table is not None:
        from dask.base import tokenize

        source["identity"] = tokenize(plan.table)
    return {
        "source": source,
        "output": _json(dict(plan.metadata_documents())),
        "annotations": _json(plan.describe()),
    }


# The plan members that shape a job's output (`describe()`'s keys, of any plan kind), by the
# name a user knows them by; then what the options say; then what the planner derived from
# both (listed last: a resume refused names what the user changed first). The source itself is
# the fingerprint's `source` (its URL, files and metadata), whose differences read plainly.
WORDED_PLAN = {
    "source_scale": "source scale", "source_axes": "source axes",
    "format": "format", "layer_type": "layer type", "data_type": "data type",
    "channels": "channels", "size_xyz": "size", "resolution_xyz": "voxel size (nm)",
    "voxel_offset_xyz": "voxel offset", "chunk_size_xyz": "chunk size", "encoding": "encoding",
    "pyramid": "pyramid", "generated_from_level": "mesh level",
    "generated_from_scale": "source scale", "block_xyz": "mesh block",
    "max_error_nm": "mesh max error (nm)", "lods": "mesh levels of detail",
    "dust_threshold": "dust threshold", "object_ids": "object ids",
    "teasar": "TEASAR parameters", "tick_threshold": "tick threshold",
}  # fmt: skip
WORDED_OPTIONS = {
    "compression": "compression", "compression_level": "compression level",
    "jpeg_quality": "jpeg quality", "compressed_segmentation_block_size": "block size",
    "index_location": "index location", "zarr_layout": "zarr layout",
    "legacy_to_multires": "legacy to multires",
}  # fmt: skip
WORDED_LAYOUT = {
    "shard_shape_chunks_xyz": "shard shape (chunks)", "zarr_axes": "zarr axes",
    "sharding": "sharding",
}  # fmt: skip


def in_words(plan: Any) -> dict[str, str]:
    """What shapes a job's output, by name (`format`, `chunk size`, `sharding shard bits`),
    each worded as the plan resolved it: the job's record keeps it beside the fingerprint, so
    a resume refused for other options names each that differs."""
    described = plan.describe()
    words = _plan_words(described, WORDED_PLAN)
    if "size_xyz" in described:  # a volume: one level unless it has a pyramid
        words.setdefault("pyramid levels", "1")
    for name, label in WORDED_OPTIONS.items():
        value = getattr(plan.options, name, None)
        words[label] = "default" if value is None else _worded(value)
    return words | _plan_words(described, WORDED_LAYOUT)


def _plan_words(described: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The members of a plan's `describe()` that `labels` names, a member that is an object
    (sharding, pyramid) as one word per member of its own."""
    words: dict[str, str] = {}
    for key, label in labels.items():
        value = described.get(key)
        if isinstance(value, dict):
            words |= {f"{label} {k.replace('_', ' ')}": _worded(v)
                      for k, v in value.items() if k != "@type"}  # fmt: skip
        elif key in described:
            words[label] = _worded(value)
    return words


def _worded(value: Any) -> str:
    """A plan's value as a person reads it: `64,64,64`, `4.5`, `none`."""
    if isinstance(value, list | tuple):
        return ",".join(_worded(v) for v in value)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def digest(fingerprint: Fingerprint) -> str:
    """A short, stable name of a fingerprint (what receipts and leases record)."""
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def differences(
    old: Any,
    new: Any,
    old_words: Any = None,
    new_words: dict[str, str] | None = None,
    limit: int = 4,
) -> list[str]:
    """What differs between two fingerprints, as `path: old -> new` lines, the broadest first
    (the source's URL before its file's change time; at most `limit`, then how many more).
    Where both jobs worded their options (`in_words`), each that differs is named instead
    (`format: zarr3 now, precomputed before`), with the source's differences."""
    found: list[str] = []
    _compare(old, new, "", found)
    found.sort(key=lambda line: line.split(":", 1)[0].count("."))
    if isinstance(old_words, dict) and new_words:
        worded = [f"{label}: {new_words[label]} now, {old_words[label]} before"
                  for label in new_words
                  if label in old_words and old_words[label] != new_words[label]]  # fmt: skip
        if worded:
            found = [*worded, *(line for line in found if line.startswith("source."))]
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
    """A value in a line: a whole document (an `info` recorded, none now) named, not dumped."""
    text = json.dumps(value, sort_keys=True)
    if len(text) <= 80:
        return text
    if isinstance(value, dict | list):
        return f"a {'document' if isinstance(value, dict) else 'list'} of {len(value)}"
    return text[:77] + "..."


# Each dataset kind's fingerprint, registered once.
FINGERPRINTS: dict[str, Callable[[Any], Fingerprint]] = {
    DatasetKind.VOLUME: volume_fingerprint,
    DatasetKind.OBJECTS: objects_fingerprint,
    DatasetKind.GENERATED: generated_fingerprint,
    DatasetKind.ANNOTATIONS: annotations_fingerprint,
    DatasetKind.ADDITION: addition_fingerprint,
}


def _json(value: Any) -> Any:
    """As it reads back from JSON (tuples become lists), so recorded and fresh compare."""
    return json.loads(json.dumps(value))
