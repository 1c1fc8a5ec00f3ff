"""An addition to a dataset that already exists (ours or another tool's): its record, the
checks before it runs, its first step and its last.

The dataset itself is never written but for its metadata document (the `info` of a
precomputed volume, the `zarr.json` of an OME-Zarr group: its "root"), last, in one write
conditional on the version the job read (additions/plan.py), and `.shardwright/` beside its
objects (the lease that keeps other jobs out, the record of the running addition, one record
per finished addition). What the addition makes are new objects: meshes and skeletons,
datasets of their own in directories below it, each with its own lease, receipts and
manifest; level shards, under the addition's own run and receipts; documents written just
before the root (segment properties, the new levels' array metadata).

Under `.shardwright/`:
- `addition.json`: the addition running or stopped: its job, the root before it and the
  digests of the root after it and of the documents it writes. A run killed after the root
  was written finds here that the root it sees is its own, and plans from the root before;
- `additions/<time>-<job>.json`: the manifest of what a finished addition added (its level
  shards, its companions' totals, the digests of the root and the documents it wrote). For a
  dataset of ours, its own manifest's digests follow them.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import time
from typing import Any

from shardwright.common.control_keys import CONTROL_PREFIX
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import NAMED, DestinationError, ManifestError
from shardwright.lifecycle import fencing, lease
from shardwright.lifecycle.destination import check_location, readable_manifest
from shardwright.lifecycle.fingerprint import Fingerprint, differences
from shardwright.lifecycle.journal import stream_crc32c
from shardwright.lifecycle.manifest import (
    CompanionTotals,
    Manifest,
    ReceiptTable,
    build_manifest,
    parse_manifest,
    write_manifest,
)
from shardwright.lifecycle.runs import FencedStore, JobRun, run_of
from shardwright.stores import Store
from shardwright.stores.base import Expected
from shardwright.version import __version__

RECORD = f"{CONTROL_PREFIX}addition.json"
ADDED = f"{CONTROL_PREFIX}additions/"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Record:
    """The running (or stopped) addition's record (RECORD)."""

    job: str
    run: str
    root: str  # the dataset's metadata document the addition writes last: info, zarr.json
    before: bytes  # that document as it was before the addition
    after_sha256: str
    fingerprint: Fingerprint
    options: dict[str, str]
    documents: dict[str, str] = dataclasses.field(default_factory=dict)  # key: sha256 written
    level_shards: dict[str, int] = dataclasses.field(default_factory=dict)  # key: shards planned

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "run": self.run,
            "started": _now(),
            "shardwright_version": __version__,
            "root": self.root,
            "before": self.before.decode(),
            "after_sha256": self.after_sha256,
            "fingerprint": self.fingerprint,
            "options": self.options,
            "documents": self.documents,
            "level_shards": self.level_shards,
        }


def read_record(store: Store) -> Record | None:
    """The record of an addition that began here and has not finished; None without one."""
    try:
        found = json.loads(store.read(RECORD, small=True))
        return Record(
            job=str(found["job"]),
            run=str(found["run"]),
            root=str(found["root"]),
            before=str(found["before"]).encode(),
            after_sha256=str(found["after_sha256"]),
            fingerprint=dict(found["fingerprint"]),
            options=dict(found.get("options") or {}),
            documents={str(k): str(v) for k, v in (found.get("documents") or {}).items()},
            level_shards={str(k): int(v) for k, v in (found.get("level_shards") or {}).items()},
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise DestinationError(
            f"{store.url}/{RECORD} is not an addition record shardwright can read ({exc}); "
            "shardwright changes nothing there"
        ) from None


def root_before(store: Store, current: bytes) -> bytes:
    """The dataset's metadata document (`current`: as read now) as it was before any
    addition of ours that has not finished: itself, or, where an addition killed after
    writing it left its record, the document that addition began from."""
    record = read_record(store)
    if record is not None and sha256(current) == record.after_sha256:
        return record.before
    return current


def written_here(store: Store, key: str) -> set[str]:
    """The sha256 of every version of `key` shardwright wrote in the dataset: as its own
    manifest, its finished additions and the addition stopped there record them."""
    digests = set()
    try:
        manifest = readable_manifest(store)
    except DestinationError:
        manifest = None
    for record in [*([manifest] if manifest is not None else []), *read_additions(store)]:
        if key in record.metadata:
            digests.add(record.metadata[key])
    running = read_record(store)
    if running is not None and key in running.documents:
        digests.add(running.documents[key])
    return digests


def check_addition(
    store: Store,
    *,
    mode: str,
    job: str,
    fingerprint: Fingerprint,
    words: dict[str, str],
    wait: float,
    break_lease: bool,
) -> None:
    """Refuse, reading only, an addition this mode ("new", "resume", "overwrite") must not
    begin: the dataset is the current or home directory, another job holds its lease, or
    another addition is unfinished there (a new one must not bury it; a resume must be of
    the same job)."""
    check_location(store.url, store.storage_options, [])
    if not wait:
        lease.check_free(store, break_lease=break_lease)
    replaces = fingerprint.get("replaces") or []
    if replaces and mode == "new":
        raise DestinationError(
            f"{store.url}: this plan replaces levels {', '.join(replaces)} that shardwright "
            "added: run it with {overwrite}",
            overwrite=True,
        )
    if mode == "overwrite" and fingerprint.get("levels") and not replaces:
        made = list(added_levels(read_additions(store)))
        if made:
            raise DestinationError(
                f"{store.url}: levels {', '.join(made)} were added by shardwright; a plan "
                "that makes them again is made with {overwrite} too (`plan(..., "
                "overwrite=True)`, `convert --dry-run --overwrite`); without {overwrite}, "
                "{mips} adds levels above them",
                overwrite=True, mips=NAMED,
            )  # fmt: skip
    record = read_record(store)
    if record is None or mode == "overwrite":
        return
    if record.job != job:
        found = differences(record.fingerprint, fingerprint, record.options, words)
        raise DestinationError(
            f"{store.url}: an addition that differs from this one began here and did not "
            f"finish ({'; '.join(found) or 'fingerprints differ'}); run that addition again "
            "with {resume}, or pass {overwrite} to make this one instead",
            resume=True,
            overwrite=True,
        )
    if mode == "new":
        raise DestinationError(
            f"{store.url}: this addition began here and did not finish; pass {{resume}} to "
            "finish it",
            resume=True,
        )


def begin_addition(
    store: Store,
    *,
    job: str,
    run: str,
    owner: lease.Owner,
    timeout: float,
    wait: float,
    break_lease: bool,
    record: Record,
) -> tuple[JobRun, list[str]]:
    """The addition's first step: the dataset's lease, then its record (returns the run its
    writes carry and the notice of a lease taken over). Nothing of the dataset's own is
    written."""
    held = lease.Lease(store, job, timeout, run=run, owner=owner)
    notice = lease.acquire_waiting(held, wait, break_lease)
    try:
        fenced = fencing.fenced(held.job_run)
        FencedStore(store, fenced).write_text(RECORD, json.dumps(record.to_json(), indent=1))
    except BaseException:
        held.release()
        raise
    return fenced, [notice] if notice else []


def write_root_last(
    store: Store, root: str, before: bytes, after: bytes, version: Expected | None
) -> None:
    """The dataset's metadata document `root` replaced by `after`, only if it is still
    `before` (as the job read it when planned): conditional on its version where the store
    has one (S3's ETag, GCS's generation), compared just before the write elsewhere. Nothing
    is written where it is `after` already (a resumed run's)."""
    current = store.read(root, small=True)
    if current == after:
        return
    changed = DestinationError(
        f"{store.url}/{root} changed since this job read it (another writer?); shardwright "
        f"wrote nothing to it: what this job added is complete below the dataset, and the "
        f"same command run again with {{resume}} names it in the {root} as it is now",
        resume=True,
    )
    if current != before:
        raise changed
    run = run_of(store)
    if run is not None and run.fence is not None:
        run.fence(store)  # the lease still names this job
    condition = version if version is not None and version.version is not None else None
    try:
        store.write_object(root, after, condition)
    except FileExistsError:
        raise changed from None


def finish_addition(
    store: Store,
    *,
    description: dict[str, Any],
    documents: list[tuple[str, bytes]],
    root: str,
    root_after: bytes,
    version: Expected | None,
    companions: list[CompanionTotals],
    receipts: ReceiptTable,
    seconds: float,
    cluster: str | None,
) -> Manifest:
    """The addition's last step, once every companion's manifest is written and every level
    shard stored (`receipts`): its documents, then the root naming them all (written last,
    conditionally); our own dataset's manifest follows their digests, the record of what was
    added (the level shards with their sizes and crc32c) is kept, and the lease released."""
    run = run_of(store)
    assert run is not None, "an addition writes through its run"
    record = read_record(store)
    before = record.before if record is not None else store.read(root, small=True)
    for key, document in documents:
        if store.size(key) != len(document) or store.read(key, small=True) != document:
            store.write_object(key, document)
    write_root_last(store, root, before, root_after, version)
    _delete_replaced(store, [str(key) for key in description.get("replaces") or []])
    digests = {key: sha256(document) for key, document in [*documents, (root, root_after)]}
    try:
        ours = readable_manifest(store)
    except DestinationError:
        ours = None
    if ours is not None and any(ours.metadata.get(k) != d for k, d in digests.items()):
        write_manifest(store, dataclasses.replace(ours, metadata={**ours.metadata, **digests}))
    added = build_manifest(
        description,
        receipts,
        seconds,
        companions=companions,
        job=run.job,
        metadata=digests,
        cluster=cluster,
        dataset=DatasetKind.ADDITION,
    )
    # Named by when it finished, so that a listing gives the additions in order.
    name = f"{ADDED}{time.time_ns():020d}-{run.job}.json"
    store.write_text(name, json.dumps(added.to_json(), indent=1) + "\n")
    store.delete(RECORD)
    lease.release(store)
    return added


def _delete_replaced(store: Store, keys: list[str]) -> None:
    """The shards of levels shardwright added that the root no longer names (`keys`: an
    addition with overwrite replaced them), and an OME-Zarr level array's `zarr.json`: each
    deleted where it is still the object its record lists (size and crc32c; the document's
    sha256), so nothing shardwright did not write goes, and only once the root names the levels
    that replace them. What is gone already (a resumed run's) is skipped."""
    if not keys:
        return
    levels = added_levels(read_additions(store))
    for key in keys:
        added = levels.get(key)
        if added is None:
            continue
        for entry in added.shards:
            if not entry.key.startswith(f"{key}/"):
                continue
            size = store.size(entry.key)
            if size == entry.size and stream_crc32c(store, entry.key, size) == entry.crc32c:
                store.delete(entry.key)
        for name, digest in added.metadata.items():
            if name.startswith(f"{key}/") and _digest_of(store, name) == digest:
                store.delete(name)


def _digest_of(store: Store, key: str) -> str | None:
    """The sha256 of a small object, None where it is gone."""
    try:
        return sha256(store.read(key, small=True))
    except FileNotFoundError:
        return None


def added_levels(additions: list[Manifest]) -> dict[str, Manifest]:
    """The levels shardwright added that no later addition replaced, by key, each with the
    record of the addition that added it (`additions`: oldest first, as read_additions
    gives them)."""
    levels: dict[str, Manifest] = {}
    for added in additions:
        for key in added.plan.get("replaces") or []:
            levels.pop(str(key), None)
        for level in added.plan.get("levels", []):
            levels[str(level.get("key"))] = added
    return levels


def read_additions(store: Store) -> list[Manifest]:
    """The records of every finished addition to the dataset, oldest first."""
    found = []
    for key in sorted(store.list_keys(ADDED.rstrip("/"))):
        try:
            found.append(parse_manifest(store.read(key, small=True), f"{store.url}/{key}"))
        except (ManifestError, FileNotFoundError):
            continue
    return found


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
