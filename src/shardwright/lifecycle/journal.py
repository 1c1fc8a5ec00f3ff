"""What a job has proven it wrote, and what an older dataset in its destination owned.

Under `.shardwright/` in the destination:
- `job.json`, the job record: the fingerprint of the job that last started writing here
  (resume continues only that job) and what it plans to write (`Planned`);
- `journal/<job>/<key>.json`, one receipt per shard a run of the job stored (or found entirely
  empty), naming the job and the object's size and crc32c as written; a folder per job, so that
  a listing tells whose a receipt is (`status` counts the running job's alone while it replaces
  another's). Resume keeps a stored shard only when its receipt names this job and the object
  still has exactly that size and crc32c. (`receipts/<key>.json`, any job's: as receipts were
  written before; another job's to this one);
- `retired/*.json`: the objects of a dataset being replaced, recorded when its manifest is
  withdrawn (so it no longer looks complete) and removed, with those objects the new dataset
  does not reuse, only after the new manifest is written.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import crc32c

from shardwright.common.control_keys import CONTROL_PREFIX, MANIFEST_KEY
from shardwright.common.receipts import Receipt
from shardwright.errors import ManifestError
from shardwright.lifecycle.fingerprint import Fingerprint
from shardwright.lifecycle.manifest import Manifest, owned_keys
from shardwright.lifecycle.runs import CONTROL_DIR, run_of
from shardwright.stores import Store
from shardwright.version import __version__

JOB_KEY = f"{CONTROL_PREFIX}job.json"
RECEIPTS = f"{CONTROL_PREFIX}journal/"  # a folder of receipts per job
LEGACY_RECEIPTS = f"{CONTROL_PREFIX}receipts/"  # any job's receipts, as written before
RETIRED = f"{CONTROL_PREFIX}retired/"
HEARTBEATS = f"{CONTROL_PREFIX}heartbeat-"
EXCHANGE = f"{CONTROL_PREFIX}exchange/"  # block spools of generated meshes and skeletons
CENSUS = f"{CONTROL_PREFIX}census/"  # their segments, a table per job and output shard


CRC_BLOCK = 16 * 1024 * 1024  # bytes read at a time when a stored object's crc32c is checked


def stream_crc32c(store: Store, key: str, size: int) -> int:
    """The crc32c of a stored object of `size` bytes, read in blocks (never held whole)."""
    crc = 0
    for start in range(0, size, CRC_BLOCK):
        crc = crc32c.crc32c(store.read_range(key, start, min(start + CRC_BLOCK, size)), crc)
    return crc


def journal_of(job: str) -> str:
    """The folder of a job's receipts."""
    return f"{RECEIPTS}{job}/"


def receipt_key(job: str, key: str) -> str:
    return f"{journal_of(job)}{key}.json"


def prepares(key: str) -> bool:
    """Whether a receipt's key is a preparing task's spool (a mesh block's, a table
    partition's), not a shard of the dataset."""
    return key.startswith(EXCHANGE)


@dataclass(frozen=True)
class Planned:
    """What a job plans to write in one dataset, as its record keeps it: its shards (every
    level of a pyramid; `estimated` where they are made from spools, known once the tasks
    before them have run) and those preparing tasks (`unit`: a table's partitions, a volume's
    mesh blocks), which store no shard. `status`, the progress line and the line a stopped
    job ends with all count against it, in the same words (`tally`)."""

    shards: int = 0
    estimated: bool = False
    preparing: int = 0
    unit: str = "blocks"

    def to_json(self) -> dict[str, Any]:
        return {"shards_planned": self.shards, "shards_estimated": self.estimated,
                "preparing_planned": self.preparing, "preparing_unit": self.unit}  # fmt: skip

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Planned:
        """What a job record plans (an older record's shards count its preparing tasks too,
        and nothing it cannot read is planned)."""
        shards, preparing = record.get("shards_planned"), record.get("preparing_planned")
        unit = record.get("preparing_unit")
        return cls(
            shards if type(shards) is int and shards > 0 else 0,
            record.get("shards_estimated") is True,
            preparing if type(preparing) is int and preparing > 0 else 0,
            unit if isinstance(unit, str) and unit else "blocks",
        )


def tally(done: int, planned: int | None, estimated: bool = False) -> str:
    """`3 / 4`, `0 / 2 estimated`, `5` (none planned): how status, the progress line and a
    stopped job's line say a count."""
    if not planned:
        return f"{done:,}"
    if estimated:  # an estimate the job has passed is no total
        return f"{done:,} / {max(planned, done):,} estimated"
    return f"{done:,} / {planned:,}"


@dataclass(frozen=True)
class Journaled:
    """A receipt as the journal stores it: the job that stored the shard and what it stored
    (`empty`: nothing, every chunk being fill; `present`: Receipt.present)."""

    key: str
    job: str
    size: int
    crc32c: int
    chunks: int
    empty: bool
    present: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "key": self.key,
            "job": self.job,
            "size": self.size,
            "crc32c": self.crc32c,
            "chunks": self.chunks,
            "empty": self.empty,
        }
        return out if self.present is None else {**out, "present": self.present}

    @classmethod
    def from_json(cls, entry: Any) -> Journaled | None:
        """The journaled receipt, or None for anything this project did not write."""
        if not isinstance(entry, dict):
            return None
        key, job, empty = entry.get("key"), entry.get("job"), entry.get("empty")
        size, crc, chunks = entry.get("size"), entry.get("crc32c"), entry.get("chunks")
        if not isinstance(key, str) or not isinstance(job, str) or not isinstance(empty, bool):
            return None
        if type(size) is not int or type(crc) is not int or type(chunks) is not int:
            return None
        present = entry.get("present")
        if present is not None and type(present) is not int:
            return None
        return cls(key, job, size, crc, chunks, empty, present)

    def receipt(self) -> Receipt:
        """The receipt of this shard kept by a resumed run."""
        return Receipt(self.key, self.size, self.crc32c, self.chunks, self.empty, resumed=True,
                       present=self.present)  # fmt: skip


def record(store: Store, receipt: Receipt) -> Receipt:
    """Journal a shard this run just stored (or found empty) as the job's; returns the
    receipt with that request counted in its own."""
    run = run_of(store)
    if run is None or receipt.resumed:
        return receipt
    before = store.requests.snapshot()
    entry = Journaled(
        receipt.key, run.job, receipt.size, receipt.crc32c, receipt.chunks, receipt.empty,
        receipt.present,
    )  # fmt: skip
    store.write_text(receipt_key(run.job, receipt.key), json.dumps(entry.to_json()) + "\n")
    return receipt.counting(store.requests.since(before))


def proven(store: Store, key: str) -> Receipt | None:
    """The receipt of a shard this job stored that is still exactly as written (its size,
    then its crc32c streamed), or None: the shard must be written again."""
    run = run_of(store)
    if run is None:
        return None
    try:
        entry = Journaled.from_json(json.loads(store.read(receipt_key(run.job, key), small=True)))
    except (FileNotFoundError, ValueError):
        return None
    if entry is None or entry.job != run.job or entry.key != key:
        return None
    size = store.size(key)
    if entry.empty:
        intact = size is None  # no object where this job found nothing to store
    else:
        intact = (
            size is not None
            and size == entry.size
            and stream_crc32c(store, key, size) == entry.crc32c
        )
    return entry.receipt() if intact else None


def read_job(store: Store) -> dict[str, Any] | None:
    """The job record, None without one; ManifestError if it is not ours to read."""
    try:
        record = json.loads(store.read(JOB_KEY, small=True))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ManifestError(f"{store.url}/{JOB_KEY} is not valid JSON ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("job"), str):
        raise ManifestError(f"{store.url}/{JOB_KEY} is not a shardwright job record")
    return record


def begin(
    store: Store,
    fingerprint: Fingerprint,
    manifest: Manifest | None,
    *,
    replace: bool,
    planned: Planned | None = None,
    words: dict[str, str] | None = None,
) -> None:
    """The coordinator's first step, under the lease and once the job runs: withdraw the
    `manifest` the destination holds if it is a dataset being replaced (`replace`, or one
    another job wrote), record this job, and remove temporaries of runs that are gone. Safe to
    run again (task retries)."""
    run = run_of(store)
    assert run is not None, "a job's coordinator writes through its run"
    if manifest is not None and (replace or manifest.job != run.job):
        retired = {
            "keys": owned_keys(manifest),
            "job": manifest.job,
            "retired_at": _now(),
        }
        store.write_text(f"{RETIRED}{uuid.uuid4().hex}.json", json.dumps(retired) + "\n")
        store.delete(MANIFEST_KEY)
    job = {
        "job": run.job,
        "run": run.run,
        "started": _now(),
        **(planned or Planned()).to_json(),
        "shardwright_version": __version__,
        "fingerprint": fingerprint,
        "options": words or {},  # the fingerprint's options by name (fingerprint.in_words)
    }
    store.write_text(JOB_KEY, json.dumps(job, indent=1) + "\n")
    store.remove_stale_temporaries(nested_marker=CONTROL_DIR, keep_writer=run.run)


@dataclass(frozen=True)
class Replaced:
    """What older datasets in a destination owned and the new one does not reuse: removed
    only once the new manifest is written (`remove`)."""

    objects: list[str]  # shards and metadata of the replaced datasets
    receipts: list[str]  # receipts of other jobs, and of keys this job did not produce
    records: list[str]  # the retired records themselves
    heartbeats: list[str]  # of runs that are gone


def replaced(store: Store, stored: Iterable[str], journaled: Iterable[str]) -> Replaced:
    """Find what `remove` will remove (reads only, before the new manifest is written).

    `stored`: every key the new dataset holds (shards, metadata); `journaled`: every key this
    job has a receipt for (stored or empty).
    """
    keep = set(stored) | {MANIFEST_KEY}
    journaled = set(journaled)
    records = store.list_keys(RETIRED.rstrip("/"))
    owned: set[str] = set()
    for name in records:
        try:
            keys = json.loads(store.read(name, small=True)).get("keys", [])
        except (ValueError, AttributeError):
            continue  # an unreadable record names nothing we could prove is ours
        owned.update(k for k in keys if isinstance(k, str))
    run = run_of(store)
    ours = journal_of(run.job) if run is not None else None
    stale: list[tuple[str, str]] = []  # (receipt, the key it names)
    for folder in (RECEIPTS, LEGACY_RECEIPTS):
        for name in store.list_keys(folder.rstrip("/")):
            if not name.endswith(".json"):
                continue
            key = name[len(folder) : -len(".json")]
            if folder == RECEIPTS:
                key = key.partition("/")[2]  # after the job's folder
                if ours is not None and name.startswith(ours) and key in journaled:
                    continue
            stale.append((name, key))
    owned.update(key for _, key in stale)
    objects = [
        key
        for key in sorted(owned - keep)
        if not key.startswith(CONTROL_PREFIX) and ".." not in key.split("/")
    ]
    beat = f"heartbeat-{run.run}.json" if run is not None else None
    heartbeats = [
        f"{CONTROL_PREFIX}{name}"
        for name in store.list_sizes(CONTROL_PREFIX.rstrip("/"))
        if f"{CONTROL_PREFIX}{name}".startswith(HEARTBEATS) and name != beat
    ]
    return Replaced(objects, [name for name, _ in stale], records, heartbeats)


def remove(store: Store, found: Replaced) -> None:
    """Remove what `replaced` found: the old objects first, their records last, so that a
    removal cut short is finished by the next run of the job."""
    for key in [*found.objects, *found.receipts, *found.heartbeats, *found.records]:
        store.delete(key)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
