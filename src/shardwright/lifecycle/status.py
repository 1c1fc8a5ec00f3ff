"""Where a job writing a destination stands, read from what the job writes anyway: its record
(`job.json`: job, run, start, what it plans: `journal.Planned`), its lease and heartbeat (who
holds it, when it was last heard from), its receipts (one per shard stored, and one per
preparing task's spool: a mesh block's, a table partition's) and the objects' sizes, and,
once it is done, its manifest. Reads only: a few listings and small objects, cheap on a
bucket, so a job started with `--detach` or as a Kubernetes Job can be watched from anywhere.

The journal is the one truth about a stopped job: `status` counts its receipts, which
`--resume` keeps (each proven first), and the line a stopped `convert` ends with says the same
(`JobStatus.stored`): the receipts of the job its record names (a folder of them per job, so an
`--overwrite` with other options does not count those of the job it replaces).
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from shardwright.common.control_keys import CONTROL_PREFIX, MANIFEST_KEY
from shardwright.errors import DestinationError, ManifestError
from shardwright.lifecycle.addition import read_additions, read_record
from shardwright.lifecycle.destination import readable_manifest
from shardwright.lifecycle.journal import Planned, journal_of, prepares, read_job, tally
from shardwright.lifecycle.lease import current_lease, lease_key
from shardwright.lifecycle.manifest import read_manifest
from shardwright.planning.text import human_bytes
from shardwright.stores import Store, open_store

COMPANIONS = ("mesh", "skeletons")  # datasets a volume's info may name, written by its job


@dataclass
class JobStatus:
    """One dataset's job: `state` is finished, running, stopped, or replacing (a finished
    dataset that a new job is writing over)."""

    dest: str
    state: str
    job: str | None = None
    run: str | None = None
    started: str | None = None
    holder: str | None = None  # host, pid and run of the lease's holder
    heard_seconds_ago: float | None = None
    shards_planned: int | None = None
    shards_estimated: bool = False  # the plan's count of shards made from spools
    shards_stored: int = 0
    preparing: str | None = None  # what runs before the shards (blocks, partitions), if any
    preparing_planned: int | None = None
    preparing_done: int = 0
    bytes_stored: int = 0
    bytes_per_second: float | None = None
    seconds_left: float | None = None
    lease_unreadable: str | None = None  # what is wrong with a lease object that is there
    adds: list[str] | None = None  # an addition's: the directories it adds
    levels: list[str] = field(default_factory=list)  # an addition's: the levels it adds
    companions: list[JobStatus] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"{self.dest}: {self.state}" + (f", job {self.job[:12]}" if self.job else "")]
        if self.holder:
            heard = self.heard_seconds_ago
            lines.append(f"  held by      {self.holder}, last heard from {heard:.0f} s ago")
        if self.lease_unreadable:
            lines.append(f"  lease        {self.lease_unreadable}")
        if self.started:
            lines.append(f"  started      {self.started}")
        if self.adds is not None:
            added = ", ".join([*(f"{name}/" for name in self.adds), *self.levels])
            lines.append(f"  adds         {added}; its metadata names them, last")
            if self.levels:
                done, planned = self.shards_stored, self.shards_planned
                lines.append(f"  shards       {tally(done, planned, False)} of its levels")
            return "\n".join([*self._stopped(lines), *(c.summary() for c in self.companions)])
        for unit, done, planned, estimated in self.counts():
            share = f" ({100 * done / planned:.1f} %)" if planned and not estimated else ""
            size = f", {human_bytes(self.bytes_stored)}" if unit == "shards" else ""
            lines.append(f"  {unit:<12} {tally(done, planned, estimated)}{share}{size}")
        left = "" if self.seconds_left is None else f"about {_duration(self.seconds_left)}"
        if self.bytes_per_second is not None and self.state == "running":
            rate = f"{human_bytes(int(self.bytes_per_second))}/s"
            lines.append(f"  rate         {rate}" + (f", {left} left" if left else ""))
        elif left and self.state == "running":  # its preparing tasks run: no object's bytes yet
            lines.append(f"  left         {left}")
        return "\n".join([*self._stopped(lines), *(c.summary() for c in self.companions)])

    def counts(self) -> list[tuple[str, int, int | None, bool]]:
        """(unit, done, planned, estimated): its preparing tasks where it has any, its shards."""
        shards = ("shards", self.shards_stored, self.shards_planned, self.shards_estimated)
        if self.preparing is None:
            return [shards]
        return [(self.preparing, self.preparing_done, self.preparing_planned, False), shards]

    def stored(self) -> str:
        """What the destination holds of the job, its companions' included, as one phrase
        (`shards 5 / 16`; `shards 16 / 16, mesh/ blocks 3 / 4 and shards 0 / 2 estimated`):
        what a stopped job's last line says, and what `--resume` keeps."""
        phrases = []
        for status in [self, *self.companions]:
            if status.adds is not None and not status.levels:
                continue  # an addition's own line names its directories: no shards of its own
            name = "" if status is self else status.dest.rstrip("/").rsplit("/", 1)[-1] + "/ "
            counted = [f"{unit} {tally(done, planned, estimated)}"
                       for unit, done, planned, estimated in status.counts()]  # fmt: skip
            phrases.append(name + " and ".join(counted))
        return ", ".join(phrases)

    def _stopped(self, lines: list[str]) -> list[str]:
        if self.state != "stopped":
            return lines
        return [*lines, "  continue it with the same convert command and --resume"]


def job_status(dest: str, storage_options: dict[str, Any] | None = None) -> JobStatus:
    """The status of the job that writes (or wrote) `dest`, with its meshes' and skeletons'."""
    store = open_store(dest, storage_options)
    if store.is_file():
        raise DestinationError(
            f"{store.url} is a file: status reads the folder a job writes (its job record "
            f"under {CONTROL_PREFIX}, its manifest)"
        )
    names = _companions(store)
    added = _addition_status(store)
    if added is not None and added.adds is not None:
        names = [*names, *(n for n in added.adds if n not in names)]
    if read_job(store) is None and readable_manifest(store) is None and added is not None:
        status = added  # a dataset another tool wrote: what shardwright added to it
    else:
        status = _dataset_status(store)
        if added is not None:
            status.companions.append(added)
    for name in names:
        sub = open_store(f"{store.url}/{name}", storage_options)
        if read_job(sub) is not None or read_manifest(sub) is not None:
            status.companions.append(_dataset_status(sub))
    return status


def _addition_status(store: Store) -> JobStatus | None:
    """The addition running or stopped in the dataset (its record), or else the last one
    that finished; None where nothing was ever added."""
    record = read_record(store)
    if record is None:
        finished = read_additions(store)
        if not finished:
            return None
        last = finished[-1]
        adds = list(last.plan.get("adds", {}).values())
        levels = [str(level.get("key")) for level in last.plan.get("levels", [])]
        shards = last.totals.shards
        return JobStatus(dest=f"{store.url} (addition)", state="finished", job=last.job,
                         started=last.created, adds=adds, levels=levels, shards_stored=shards,
                         shards_planned=shards)  # fmt: skip
    adds = list(record.fingerprint.get("adds", {}).values())
    status = JobStatus(dest=f"{store.url} (addition)", state="stopped", job=record.job,
                       run=record.run, adds=adds, levels=list(record.level_shards))  # fmt: skip
    if record.level_shards:  # its level shards stored: their receipts, in the journal
        journal = journal_of(record.job)
        receipts = store.sizes_below(journal.rstrip("/"))
        status.shards_planned = sum(record.level_shards.values())
        status.shards_stored = sum(
            1 for key in receipts for level in record.level_shards
            if key.startswith(f"{journal}{level}/") and key.endswith(".json")
        )  # fmt: skip
    lease = current_lease(store)
    if lease is not None and lease[1] is not None and lease[1].run == record.run:
        holder, now = lease[1], time.time()
        status.holder = f"host {holder.host}, pid {holder.pid}, run {holder.run[:12]}"
        status.heard_seconds_ago = round(now - lease[2], 1)
        if now - lease[2] <= holder.timeout and not holder.gone_here():
            status.state = "running"
    return status


def _dataset_status(store: Store) -> JobStatus:
    try:
        record = read_job(store)
    except ManifestError as exc:
        raise DestinationError(f"{store.url}: {exc}") from None
    manifest = readable_manifest(store)
    lease = current_lease(store)
    if record is None and manifest is None:
        raise DestinationError(f"{store.url} holds no shardwright job (no job record, no manifest)")
    now = time.time()
    status = JobStatus(dest=store.url, state="stopped")
    planned = Planned.from_record(record or {})
    if record is not None:
        status.job, status.run = record.get("job"), record.get("run")
        status.started = record.get("started")
        status.shards_planned = planned.shards or None
        status.shards_estimated = planned.estimated
        if planned.preparing:
            status.preparing, status.preparing_planned = planned.unit, planned.preparing
    live = False
    holder = lease[1] if lease is not None else None
    if lease is not None and holder is None:
        status.lease_unreadable = (
            f"{lease_key(lease[0])} is not a lease shardwright can read: a job may hold the "
            "destination; convert refuses it unless --break-lease"
        )
    if lease is not None and holder is not None:
        heard = lease[2]
        status.holder = f"host {holder.host}, pid {holder.pid}, run {holder.run[:12]}"
        status.heard_seconds_ago = round(now - heard, 1)
        live = now - heard <= holder.timeout and not holder.gone_here()
    sizes = store.sizes_below()
    journal = journal_of(status.job) if status.job is not None else None
    journaled = [k[len(journal) : -len(".json")] for k in sizes
                 if journal and k.startswith(journal) and k.endswith(".json")]  # fmt: skip
    status.preparing_done = sum(map(prepares, journaled))
    status.shards_stored = len(journaled) - status.preparing_done
    status.bytes_stored = _own_bytes(sizes)
    if manifest is not None and not live:
        status.state = "finished"
        # Done: what the manifest holds is the whole (the plan's count of shards may have
        # been an estimate), every preparing task ran (its spools are gone).
        status.shards_stored = status.shards_planned = manifest.totals.shards
        status.shards_estimated = False
        status.preparing_done = status.preparing_planned or 0
        return status
    if live:
        status.state = "replacing" if manifest is not None else "running"
        elapsed = _elapsed(status.started, now)
        done = status.preparing_done + status.shards_stored  # tasks, as the progress line
        tasks = (status.preparing_planned or 0) + (status.shards_planned or 0)
        if elapsed and status.shards_planned and done:
            status.seconds_left = max(0.0, elapsed * (tasks - done) / done)
        # A rate once the dataset's own objects are stored: while generated meshes' blocks
        # run (their receipts are of spools) it holds its metadata only.
        if elapsed and status.bytes_stored and status.shards_stored:
            status.bytes_per_second = status.bytes_stored / elapsed
    return status


def _own_bytes(sizes: dict[str, int]) -> int:
    """Bytes of a dataset's own objects: not its job's control objects or manifest, nor those
    of a dataset nested in a folder of it (its meshes and skeletons, a table's annotations
    converted there), which has a control folder or a manifest of its own."""
    nested = set()
    for key in sizes:
        if key.startswith(CONTROL_PREFIX):
            continue
        if (at := key.find(f"/{CONTROL_PREFIX}")) >= 0:
            nested.add(key[: at + 1])
        elif key.endswith(f"/{MANIFEST_KEY}"):
            nested.add(key[: -len(MANIFEST_KEY)])
    elsewhere = (CONTROL_PREFIX, *nested)
    return sum(
        size for key, size in sizes.items() if not key.startswith(elsewhere) and key != MANIFEST_KEY
    )


def _companions(store: Store) -> list[str]:
    """The mesh and skeleton directories a precomputed volume's info names."""
    try:
        info = json.loads(store.read("info"))
    except (FileNotFoundError, ValueError):
        return []
    if not isinstance(info, dict):
        return []
    names = [info.get(key) for key in COMPANIONS]
    return [n for n in names if isinstance(n, str) and n and "/" not in n and ".." not in n]


def _elapsed(started: str | None, now: float) -> float | None:
    if not started:
        return None
    try:
        return max(0.0, now - datetime.datetime.fromisoformat(started).timestamp())
    except ValueError:
        return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
