"""The manifest, typed; JSON only where it is stored.

The coordinator folds the shard tasks' receipts (`common/receipts.py`) into the `Manifest`,
the completion record written last: every shard object (`ShardEntry`: key, size, crc32c,
chunk count), the sha256 of each metadata object (`info`, `zarr.json`), the job's fingerprint
digest and the plan that produced them. `verify` checks a destination against it, and its
absence says a job did not finish. A manifest read back is validated first: its keys name
objects this project may read and, when it replaces a dataset, delete, so a key that climbs
out of the dataset is refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.common.receipts import Receipt, ShardEntry, check_key, sum_requests
from shardwright.common.vocabulary import DatasetKind, OutputFormat, names
from shardwright.errors import ManifestError
from shardwright.stores import Store
from shardwright.version import __version__

DATASETS = names(DatasetKind)

MISSING_EXAMPLES = 5  # absent source chunks a manifest names
FORMATS = names(OutputFormat)


@dataclass(frozen=True)
class LevelTotals:
    """What one pyramid level wrote."""

    level: int
    shards: int
    bytes: int
    chunks: int

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Totals:
    """A job's sums for one dataset: shards stored (and kept from an earlier run, and left
    out as empty), their bytes and chunks (segments for meshes and skeletons), the seconds it
    took, the store requests made (`puts`, `gets`, ..., `retries`), source chunks that were
    not stored (written as the fill value) with the first few keys, per level in a pyramid,
    and of generated meshes or skeletons the segments present over the dust threshold
    (`segments_present`, counted by the shard tasks: each must have its object)."""

    shards: int
    bytes: int
    chunks: int
    resumed_shards: int = 0
    empty_shards_skipped: int = 0
    seconds: float | None = None
    requests: dict[str, int] = field(default_factory=dict)
    source_chunks_missing: int = 0
    source_chunks_missing_examples: tuple[str, ...] = ()
    levels: tuple[LevelTotals, ...] = ()
    segments_present: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shards": self.shards,
            "bytes": self.bytes,
            "chunks": self.chunks,
            "resumed_shards": self.resumed_shards,
            "empty_shards_skipped": self.empty_shards_skipped,
            "seconds": self.seconds,
            "requests": dict(self.requests),
            "source_chunks_missing": self.source_chunks_missing,
        }
        if self.source_chunks_missing_examples:
            out["source_chunks_missing_examples"] = list(self.source_chunks_missing_examples)
        if self.levels:
            out["levels"] = [level.to_json() for level in self.levels]
        if self.segments_present is not None:
            out["segments_present"] = self.segments_present
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], where: str = MANIFEST_KEY) -> Totals:
        """Totals as a manifest stores them (members a manifest of an earlier version lacks
        take their defaults)."""
        try:
            return cls(
                shards=int(obj["shards"]),
                bytes=int(obj["bytes"]),
                chunks=int(obj["chunks"]),
                resumed_shards=int(obj.get("resumed_shards", 0)),
                empty_shards_skipped=int(obj.get("empty_shards_skipped", 0)),
                seconds=None if obj.get("seconds") is None else float(obj["seconds"]),
                requests={str(k): int(v) for k, v in obj.get("requests", {}).items()},
                source_chunks_missing=int(obj.get("source_chunks_missing", 0)),
                source_chunks_missing_examples=tuple(
                    str(k) for k in obj.get("source_chunks_missing_examples", ())
                ),
                levels=tuple(
                    LevelTotals(
                        int(r["level"]), int(r["shards"]), int(r["bytes"]), int(r["chunks"])
                    )
                    for r in obj.get("levels", ())
                ),  # fmt: skip
                segments_present=None
                if obj.get("segments_present") is None
                else int(obj["segments_present"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(
                f"{where}: 'totals' is not what this project writes ({exc!r})"
            ) from None


@dataclass(frozen=True)
class CompanionTotals:
    """A companion dataset of the job (its meshes or skeletons): where it lies and its totals,
    which the volume's manifest repeats."""

    dest: str
    totals: Totals


@dataclass(frozen=True)
class Manifest:
    """A dataset's completion record, what `convert` returns. `dataset`: "volume" or
    "objects" (meshes or skeletons); `plan` the plan's description as stored; `totals` the
    job's sums; `metadata` the sha256 of each metadata object; `companions` the totals of the
    meshes and skeletons written by the same job, by where they lie."""

    format: str
    plan: dict[str, Any]
    totals: Totals
    shards: tuple[ShardEntry, ...]
    dataset: str = DatasetKind.VOLUME
    job: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    created: str | None = None
    shardwright_version: str | None = None
    companions: dict[str, Totals] = field(default_factory=dict)
    cluster: str | None = None  # where the shard tasks ran, in words

    def to_json(self) -> dict[str, Any]:
        out = {
            "shardwright_version": self.shardwright_version,
            "format": self.format,
            "dataset": self.dataset,
            "created": self.created,
            "cluster": self.cluster,
            "job": self.job,
            "metadata": dict(self.metadata),
            "plan": self.plan,
            "totals": self.totals.to_json(),
            "shards": [entry.to_json() for entry in self.shards],
        }
        if self.companions:
            out["companions"] = {where: t.to_json() for where, t in self.companions.items()}
        return out

    @classmethod
    def from_json(cls, manifest: Any, where: str = MANIFEST_KEY) -> Manifest:
        """A manifest's JSON, checked for the shape this project writes."""
        if not isinstance(manifest, dict):
            raise ManifestError(f"{where} is not a JSON object")
        if manifest.get("format") not in FORMATS:
            raise ManifestError(
                f"{where}: format {manifest.get('format')!r} is not one of {FORMATS}"
            )
        for name, kind in (("plan", dict), ("totals", dict), ("shards", list)):
            if not isinstance(manifest.get(name), kind):
                raise ManifestError(f"{where}: {name!r} is missing or not a {kind.__name__}")
        shards = tuple(
            ShardEntry.from_json(entry, f"{where}: shards[{i}]")
            for i, entry in enumerate(manifest["shards"])
        )
        metadata = manifest.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ManifestError(f"{where}: 'metadata' is not an object")
        for key, digest in metadata.items():
            check_key(key, f"{where}: metadata key")
            if not isinstance(digest, str):
                raise ManifestError(f"{where}: metadata[{key!r}] is not a sha256 string")
        if manifest.get("job") is not None and not isinstance(manifest["job"], str):
            raise ManifestError(f"{where}: 'job' is not a string")
        # Manifests before the `dataset` member: an objects plan names its object type.
        older = DatasetKind.OBJECTS if "object_type" in manifest["plan"] else DatasetKind.VOLUME
        dataset = manifest.get("dataset", older)
        if dataset not in DATASETS:
            raise ManifestError(f"{where}: dataset {dataset!r} is not one of {DATASETS}")
        companions = manifest.get("companions") or {}
        if not isinstance(companions, dict):
            raise ManifestError(f"{where}: 'companions' is not an object")
        return cls(
            format=manifest["format"],
            plan=manifest["plan"],
            totals=Totals.from_json(manifest["totals"], where),
            shards=shards,
            dataset=dataset,
            job=manifest.get("job"),
            metadata=metadata,
            created=manifest.get("created"),
            cluster=manifest.get("cluster"),
            shardwright_version=manifest.get("shardwright_version"),
            companions={w: Totals.from_json(t, where) for w, t in companions.items()},
        )


def metadata_text(document: dict[str, Any]) -> str:
    """A metadata object (`info`, `zarr.json`) exactly as it is stored."""
    return json.dumps(document, indent=1) + "\n"


def metadata_digests(documents: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The sha256 of each stored metadata object, by key (what verify compares)."""
    return {
        key: hashlib.sha256(metadata_text(document).encode()).hexdigest()
        for key, document in documents
    }


class ReceiptTable:
    """Shard receipts folded as they arrive, in a compact form: a job of 10^6 shards keeps
    about 40 bytes per shard (fixed-width fields in NumPy blocks, keys in one byte buffer,
    requests summed) instead of a Python object per receipt."""

    BLOCK = 4096
    FIELDS = np.dtype(
        [("size", "<u8"), ("crc32c", "<u4"), ("chunks", "<u8"), ("flags", "u1"), ("level", "<i2")]
    )
    EMPTY, RESUMED = 1, 2

    def __init__(self, receipts: Iterable[Receipt] = ()) -> None:
        self._blocks: list[np.ndarray] = []
        self._block = np.zeros(self.BLOCK, self.FIELDS)
        self._filled = 0
        self._keys = bytearray()
        self.requests: dict[str, int] = {}
        self.missing = 0  # source chunks written as fill, and the first few of them
        self.missing_examples: list[str] = []
        self.present: int | None = None  # segments present (generated meshes, skeletons)
        self.count = 0
        self.written = 0
        self.bytes = 0
        self.leveled = False
        for receipt in receipts:
            self.add(receipt)

    def add(self, receipt: Receipt) -> None:
        if "\0" in receipt.key:
            raise ManifestError(f"shard key {receipt.key!r} holds a NUL byte")
        flags = (self.EMPTY if receipt.empty else 0) | (self.RESUMED if receipt.resumed else 0)
        level = -1 if receipt.level is None else receipt.level
        self._block[self._filled] = (receipt.size, receipt.crc32c, receipt.chunks, flags, level)
        self._filled += 1
        if self._filled == self.BLOCK:
            self._blocks.append(self._block)
            self._block = np.zeros(self.BLOCK, self.FIELDS)
            self._filled = 0
        self._keys += receipt.key.encode() + b"\0"
        for kind, n in receipt.requests.items():
            self.requests[kind] = self.requests.get(kind, 0) + n
        self.missing += receipt.missing
        if receipt.present is not None:
            self.present = (self.present or 0) + receipt.present
        room = MISSING_EXAMPLES - len(self.missing_examples)
        self.missing_examples.extend(receipt.missing_examples[: max(room, 0)])
        self.count += 1
        self.leveled |= receipt.level is not None
        if not receipt.empty:
            self.written += 1
            self.bytes += receipt.size

    def rows(self) -> np.ndarray:
        """Every receipt's fields, in arrival order."""
        return np.concatenate([*self._blocks, self._block[: self._filled]])

    def keys(self) -> list[str]:
        """Every receipt's key, in arrival order."""
        return self._keys.decode().split("\0")[:-1]

    def entries(self) -> list[ShardEntry]:
        """The stored shards (not the empty ones), in key order: the manifest's list."""
        rows, keys = self.rows(), self.keys()
        written = np.flatnonzero((rows["flags"] & self.EMPTY) == 0)
        order = sorted(written.tolist(), key=keys.__getitem__)
        size, crc, chunks = (rows[name].tolist() for name in ("size", "crc32c", "chunks"))
        return [ShardEntry(keys[i], size[i], crc[i], chunks[i]) for i in order]

    def totals(self, seconds: float | None, others: Iterable[Mapping[str, int]]) -> Totals:
        """The manifest's totals; `others`: requests made besides the shard tasks'."""
        rows = self.rows()
        stored = rows[(rows["flags"] & self.EMPTY) == 0]
        levels: tuple[LevelTotals, ...] = ()
        if self.leveled:  # a pyramid: what each level wrote
            stored_levels = stored["level"].clip(0)
            levels = tuple(
                _level_totals(int(level), stored[stored_levels == level])
                for level in np.unique(rows["level"].clip(0))
            )
        return Totals(
            shards=len(stored),
            bytes=int(stored["size"].sum()),
            chunks=int(stored["chunks"].sum()),
            resumed_shards=int(np.count_nonzero(stored["flags"] & self.RESUMED)),
            empty_shards_skipped=len(rows) - len(stored),
            seconds=None if seconds is None else round(seconds, 3),
            requests=sum_requests([self.requests, *others]),
            source_chunks_missing=self.missing,
            source_chunks_missing_examples=tuple(self.missing_examples),
            levels=levels,
            segments_present=self.present,
        )


def build_manifest(
    plan_description: dict[str, Any],
    receipts: ReceiptTable | Iterable[Receipt],
    seconds: float | None = None,
    coordinator_requests: Iterable[Mapping[str, int]] = (),
    *,
    companions: Iterable[CompanionTotals] = (),
    job: str | None = None,
    metadata: dict[str, str] | None = None,
    cluster: str | None = None,
    dataset: str = DatasetKind.VOLUME,
) -> Manifest:
    """The manifest from the shard receipts; request totals also count the coordinator's
    (preflight probe, metadata), all but the manifest's own single PUT."""
    table = receipts if isinstance(receipts, ReceiptTable) else ReceiptTable(receipts)
    return Manifest(
        format=plan_description["format"],
        plan=plan_description,
        totals=table.totals(seconds, coordinator_requests),
        shards=tuple(table.entries()),
        dataset=dataset,
        job=job,
        metadata=metadata or {},
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        cluster=cluster,
        shardwright_version=__version__,
        companions={c.dest: c.totals for c in companions},
    )


def _level_totals(level: int, stored: np.ndarray) -> LevelTotals:
    return LevelTotals(level, len(stored), int(stored["size"].sum()), int(stored["chunks"].sum()))


def write_manifest(store: Store, manifest: Manifest) -> None:
    store.write_text(MANIFEST_KEY, json.dumps(manifest.to_json(), indent=1) + "\n")


def read_manifest(store: Store) -> Manifest | None:
    """The validated manifest, None when there is none, ManifestError when it is malformed."""
    try:
        text = store.read(MANIFEST_KEY)
    except FileNotFoundError:
        return None
    return parse_manifest(text, f"{store.url}/{MANIFEST_KEY}")


def parse_manifest(text: bytes | str, where: str = MANIFEST_KEY) -> Manifest:
    """A manifest's JSON, checked for the shape this project writes."""
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{where} is not valid JSON ({exc})") from None
    return Manifest.from_json(manifest, where)


def owned_keys(manifest: Manifest) -> list[str]:
    """Every object a dataset's manifest says the job stored: shards and metadata (for
    manifests older than the `metadata` field, the metadata its format always has)."""
    from shardwright.planning.formats import driver

    keys = [shard.key for shard in manifest.shards]
    if manifest.metadata:
        return keys + list(manifest.metadata)
    levels = [str(row["level"]) for row in manifest.plan.get("levels") or []]
    return [*keys, *driver(manifest.format).reader.documents(levels)]
