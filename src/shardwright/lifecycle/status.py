"""Where a job writing a destination stands, read from what the job writes anyway: its record
(`job.json`: job, run, start, shards planned), its lease and heartbeat (who holds it, when it
was last heard from), its receipts (one per shard stored) and the objects' sizes, and, once
it is done, its manifest. Reads only: a few listings and small objects, cheap on a bucket, so
a job started with `--detach` or as a Kubernetes Job can be watched from anywhere.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from shardwright.errors import DestinationError, ManifestError
from shardwright.lifecycle.addition import read_additions, read_record
from shardwright.lifecycle.destination import readable_manifest
from shardwright.lifecycle.journal import EXCHANGE, RECEIPTS, read_job, receipt_key
from shardwright.lifecycle.lease import current_lease, lease_key
from shardwright.lifecycle.manifest import MANIFEST_KEY, read_manifest
from shardwright.lifecycle.runs import CONTROL_PREFIX
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
    shards_stored: int = 0
    bytes_stored: int = 0
    bytes_per_second: float | None = None
    seconds_left: float | None = None
    lease_unreadable: str | None = None  # what is wrong with a lease object that is there
    adds: list[str] | None = None  # an addition's: the directories it adds (no shards itself)
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
            added = ", ".join(f"{name}/" for name in self.adds)
            lines.append(f"  adds         {added}; the info names them last")
            return "\n".join([*self._stopped(lines), *(c.summary() for c in self.companions)])
        planned = f" / {self.shards_planned:,}" if self.shards_planned else ""
        share = (
            f" ({100 * self.shards_stored / self.shards_planned:.1f} %)"
            if self.shards_planned
            else ""
        )
        lines.append(
            f"  shards       {self.shards_stored:,}{planned}{share}, "
            f"{human_bytes(self.bytes_stored)}"
        )
        if self.bytes_per_second is not None and self.state == "running":
            left = (
                f", about {_duration(self.seconds_left)} left"
                if self.seconds_left is not None
                else ""
            )
            lines.append(f"  rate         {human_bytes(int(self.bytes_per_second))}/s{left}")
        return "\n".join([*self._stopped(lines), *(c.summary() for c in self.companions)])

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
        status = _dataset_status(store, names)
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
        return JobStatus(dest=f"{store.url} (addition)", state="finished", job=last.job,
                         started=last.created, adds=adds)  # fmt: skip
    adds = list(record.fingerprint.get("adds", {}).values())
    status = JobStatus(dest=f"{store.url} (addition)", state="stopped", job=record.job,
                       run=record.run, adds=adds)  # fmt: skip
    lease = current_lease(store)
    if lease is not None and lease[1] is not None and lease[1].run == record.run:
        holder, now = lease[1], time.time()
        status.holder = f"host {holder.host}, pid {holder.pid}, run {holder.run[:12]}"
        status.heard_seconds_ago = round(now - lease[2], 1)
        if now - lease[2] <= holder.timeout and not holder.gone_here():
            status.state = "running"
    return status


def _dataset_status(store: Store, companions: list[str] | None = None) -> JobStatus:
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
    if record is not None:
        status.job, status.run = record.get("job"), record.get("run")
        status.started = record.get("started")
        planned = record.get("shards_planned")
        status.shards_planned = planned if isinstance(planned, int) and planned > 0 else None
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
    receipts = [k for k in sizes if k.startswith(RECEIPTS) and k.endswith(".json")]
    spools = [k for k in receipts if k.startswith(receipt_key(EXCHANGE).removesuffix(".json"))]
    status.shards_stored = len(receipts)
    # The dataset's own objects: not the job's control objects, nor the meshes and skeletons
    # below it (each its own dataset, its bytes said on its own line).
    elsewhere = (CONTROL_PREFIX, *(f"{name}/" for name in companions or []))
    status.bytes_stored = sum(
        size for key, size in sizes.items() if not key.startswith(elsewhere) and key != MANIFEST_KEY
    )
    if manifest is not None and not live:
        status.state = "finished"
        # Done: what the manifest holds is the whole (a plan's count may have been an
        # estimate: generated meshes' shards and blocks).
        status.shards_stored = status.shards_planned = manifest.totals.shards
        return status
    if live:
        status.state = "replacing" if manifest is not None else "running"
        elapsed = _elapsed(status.started, now)
        if elapsed and status.shards_planned and status.shards_stored:
            left = status.shards_planned - status.shards_stored
            status.seconds_left = max(0.0, elapsed * left / status.shards_stored)
        # A rate once the dataset's own objects are stored: while generated meshes' blocks
        # run (their receipts are of spools) it holds its metadata only.
        if elapsed and status.bytes_stored and len(receipts) > len(spools):
            status.bytes_per_second = status.bytes_stored / elapsed
    return status


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
