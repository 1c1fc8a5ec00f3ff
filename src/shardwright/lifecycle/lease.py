"""One job per destination: a lease taken exclusively before anything is written.

The lease is a small immutable object, `.shardwright/lease-NNNNNN.json`, created only if
absent (a hard link on local disk, `ifGenerationMatch=0` on GCS, `If-None-Match: *` on S3),
naming the job, its run and its owner: the host and process that started the job (a CLI, a
notebook kernel, a pod), whose life is the job's. That process writes a heartbeat
(`.shardwright/heartbeat-<run>.json`) every quarter of the lease's timeout; a lease whose
heartbeat is older than the timeout, or whose owner is provably gone (same host, no such
process), may be taken over, as may any lease when the user says so (`--break-lease`).

Taking over never deletes first: the taker creates the next epoch's lease exclusively, so of
several jobs racing for a stale lease exactly one wins, and only then removes the older
epochs. A shard task writes only while the newest lease names its run (fencing.py: checked
before every data object), so a job whose lease was taken over stops writing.

Clocks: expiry compares the holder's heartbeat time with this machine's clock; hosts whose
clocks disagree by more than the timeout would take over early.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from shardwright.common.control_keys import CONTROL_PREFIX
from shardwright.errors import LeaseHeld, LeaseUnrenewed, ManifestError, PlanError, StoreError
from shardwright.lifecycle.run_options import DEFAULT_LEASE_TIMEOUT
from shardwright.lifecycle.runs import FencedStore, JobRun, run_of
from shardwright.stores import Store, halt, halted
from shardwright.version import __version__

LEASE_NAME = re.compile(r"lease-(\d{6,})\.json")
# A coordinator that has not renewed its lease for this share of the timeout stops its job: the
# rest of the timeout is the margin before another job may take the destination over.
UNRENEWED_STOP_SHARE = 0.5
# Runs this process owns: a lease naming this pid but none of these runs was left by an
# earlier process that had the same pid (a restarted container).
_LIVE_RUNS: set[str] = set()
# Runs whose lease this process holds, and when it took it (monotonic): from then on the lease
# must be renewed (Renewer.check), whatever the coordinator is doing.
_TAKEN: dict[str, float] = {}


def lease_key(epoch: int) -> str:
    return f"{CONTROL_PREFIX}lease-{epoch:06d}.json"


def heartbeat_key(run: str) -> str:
    return f"{CONTROL_PREFIX}heartbeat-{run}.json"


@dataclass(frozen=True)
class Owner:
    """The process a job's life is tied to: the one that started it."""

    host: str
    pid: int
    process_started: float

    @classmethod
    def this_process(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _process_started(pid) or time.time())


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: what the lease object records (never changed once written)."""

    run: str
    job: str
    host: str
    pid: int
    process_started: float
    started_at: float
    timeout: float
    epoch: int
    version: str = __version__

    @classmethod
    def from_json(cls, value: Any) -> Holder:
        if not isinstance(value, dict):
            raise ManifestError("a lease record that is not a JSON object")
        try:
            return cls(
                run=str(value["run"]),
                job=str(value["job"]),
                host=str(value["host"]),
                pid=int(value["pid"]),
                process_started=float(value["process_started"]),
                started_at=float(value["started_at"]),
                timeout=float(value["timeout"]),
                epoch=int(value["epoch"]),
                version=str(value.get("version", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(
                f"a lease record with a missing or malformed field ({exc})"
            ) from None

    def gone_here(self) -> bool:
        """The holder ran on this host and its process is gone (or had this process's pid and
        is none of its live runs: a restarted container reusing the pid)."""
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return self.run not in _LIVE_RUNS
        started = _process_started(self.pid)
        return started is None or abs(started - self.process_started) > 1.0

    def describe(self, renewed_at: float, now: float) -> str:
        return (
            f"job {self.job[:12]} (run {self.run[:12]}) on host {self.host}, pid {self.pid}, "
            f"started {_when(self.started_at)}, last heard from {now - renewed_at:.0f} s ago"
        )


def _process_started(pid: int) -> float | None:
    import psutil  # a dependency of distributed

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def _when(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="seconds")


def current_lease(store: Store) -> tuple[int, Holder | None, float] | None:
    """The newest lease in a destination: (epoch, holder or None when unreadable, when its
    holder was last heard from); None when no job holds it."""
    epochs = sorted(
        int(m.group(1))
        for name in store.list_sizes(CONTROL_PREFIX.rstrip("/"))
        if (m := LEASE_NAME.fullmatch(name))
    )
    if not epochs:
        return None
    epoch = epochs[-1]
    try:
        holder = Holder.from_json(json.loads(store.read(lease_key(epoch), small=True)))
    except FileNotFoundError:
        return None  # released between the listing and the read
    except ValueError:
        return epoch, None, 0.0
    heard = holder.started_at
    try:
        beat = json.loads(store.read(heartbeat_key(holder.run), small=True))
        heard = max(heard, float(beat["renewed_at"]))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        pass
    return epoch, holder, heard


def check_free(store: Store, *, break_lease: bool = False) -> None:
    """Refuse (LeaseHeld) when a live job holds the destination's lease; reads only."""
    found = current_lease(store)
    if found is not None:
        _, holder, heard = found
        takeover_notice(store.url, holder, heard, time.time(), break_lease)


def takeover_notice(
    url: str, holder: Holder | None, heard: float, now: float, break_lease: bool
) -> str:
    """A notice for taking over the current lease, or LeaseHeld if its job is alive."""
    if holder is None:
        if break_lease:
            return f"taking over an unreadable lease of {url} (--break-lease)"
        raise LeaseHeld(
            f"{url} is locked by an unreadable lease ({CONTROL_PREFIX}lease-*.json); if no "
            "job is writing it, pass {break_lease}",
            break_lease=True,
        )
    who = holder.describe(heard, now)
    if break_lease:
        return f"taking over the lease of {who} (--break-lease)"
    if holder.gone_here():
        return f"taking over the lease of {who}: that process is gone"
    if now - heard > holder.timeout:
        return (
            f"taking over the lease of {who}: it stopped renewing it (timeout "
            f"{holder.timeout:.0f} s)"
        )
    expires = holder.timeout - (now - heard)
    held = LeaseHeld(
        f"{url} is being written by another job: {who}. One job writes a destination at "
        f"a time. Its lease is taken over once it has not been renewed for "
        f"{holder.timeout:.0f} s (in {expires:.0f} s); pass "
        "{break_lease} only if you know that job has stopped",
        break_lease=True,
    )
    held.holder = f"{who} (it expires in {expires:.0f} s unless renewed)"
    raise held


class Lease:
    """This process's claim on one destination for one job run."""

    def __init__(
        self,
        store: Store,
        job: str,
        timeout: float = DEFAULT_LEASE_TIMEOUT,
        run: str | None = None,
        owner: Owner | None = None,
    ):
        if not timeout > 0:
            raise PlanError(f"lease timeout must be positive, got {timeout}")
        self.store = store
        self.job = job
        self.timeout = float(timeout)
        self.run = run or uuid.uuid4().hex
        self.owner = owner or Owner.this_process()
        self.epoch: int | None = None

    @property
    def job_run(self) -> JobRun:
        """The run this lease was taken for (unfenced: `fencing.fenced` adds the check)."""
        assert self.epoch is not None, "acquire the lease first"
        return JobRun(job=self.job, run=self.run, lease=lease_key(self.epoch))

    def acquire(self, *, break_lease: bool = False) -> str | None:
        """Take the lease; returns a notice when it took over another job's, raises LeaseHeld
        when another job holds it. Writes nothing but the lease (and its heartbeat)."""
        # Live before its lease exists: another thread of this process that reads the lease
        # must not take this run for one left by a dead process with the same pid.
        mine = self.owner.pid == os.getpid()
        if mine:
            _LIVE_RUNS.add(self.run)
        try:
            return self._acquire(break_lease)
        except BaseException:
            if mine and self.epoch is None:
                _LIVE_RUNS.discard(self.run)
            raise

    def _acquire(self, break_lease: bool) -> str | None:
        notice = None
        for _ in range(8):  # each round loses only to a job that won a round
            if (why := halted(self.run)) is not None:  # its job stopped meanwhile
                raise StoreError(f"{self.store.url}: {why}")
            now = time.time()
            found = current_lease(self.store)
            epoch = 1
            if found is not None:
                epoch, holder, heard = found
                if holder is not None and holder.run == self.run:  # a retried create landed
                    self._hold(epoch)
                    return notice
                notice = takeover_notice(self.store.url, holder, heard, now, break_lease)
                epoch += 1
            holder_record = Holder(
                run=self.run,
                job=self.job,
                host=self.owner.host,
                pid=self.owner.pid,
                process_started=self.owner.process_started,
                started_at=now,
                timeout=self.timeout,
                epoch=epoch,
            )
            try:
                self.store.create_exclusive(
                    lease_key(epoch), json.dumps(asdict(holder_record), indent=1).encode()
                )
            except FileExistsError:
                # Another job was first, or an earlier attempt of this very request landed.
                continue
            self._hold(epoch)
            return notice
        raise LeaseHeld(f"{self.store.url}: other jobs keep taking its lease; try again later")

    def _hold(self, epoch: int) -> None:
        """This run holds `epoch`: its first heartbeat, and the older epochs go (their jobs
        are dead or lost by now: only the newest lease counts)."""
        self.epoch = epoch
        _TAKEN[self.run] = time.monotonic()
        beat(self.store, self.run)
        for older in range(1, epoch):
            self.store.delete(lease_key(older))

    def holds(self) -> bool:
        """The newest lease still names this run (nobody took it over, it was not released)."""
        if self.epoch is None:
            return False
        try:
            holder = Holder.from_json(
                json.loads(self.store.read(lease_key(self.epoch), small=True))
            )
        except (FileNotFoundError, ValueError):
            return False
        return holder.run == self.run and not self.store.exists(lease_key(self.epoch + 1))

    def release(self) -> None:
        """Give the lease up (only if it is still this run's)."""
        if self.epoch is not None:
            release(FencedStore(self.store, self.job_run))
            self.epoch = None
        _LIVE_RUNS.discard(self.run)


def release(store: Store) -> None:
    """Remove the lease and heartbeat of `store`'s run, if the lease still names that run
    (the last step of a job's coordinator)."""
    run = run_of(store)
    assert run is not None
    try:
        holder = Holder.from_json(json.loads(store.read(run.lease, small=True)))
    except (FileNotFoundError, ValueError):
        return
    if holder.run == run.run:
        store.delete(heartbeat_key(run.run))
        store.delete(run.lease)
        _TAKEN.pop(run.run, None)


def release_run(store: Store, run: str) -> None:
    """Remove the lease of `run` wherever it took it (the process that started a job that
    failed: it knows the run, not the lease's epoch)."""
    found = current_lease(store)
    if found is not None and found[1] is not None and found[1].run == run:
        release(FencedStore(store, JobRun(job=found[1].job, run=run, lease=lease_key(found[0]))))


def beat(store: Store, run: str) -> None:
    """A heartbeat of `run`: its owner is alive now."""
    store.write_text(heartbeat_key(run), json.dumps({"run": run, "renewed_at": time.time()}))


class Renewer:
    """Keeps the leases of this process's runs alive from a daemon thread, every quarter of
    their timeout: a heartbeat while the newest lease of the destination names the run. A
    run's lease is taken by its job's first step, wherever that runs; until then there is
    nothing to renew. A run is done once its lease, having been held, is released or taken
    over.

    A lease this process took must be renewed: once it has gone unrenewed for
    UNRENEWED_STOP_SHARE of its timeout (the store unreachable from this host), `check` stops
    the job, before the timeout lets another job take the destination over, and `halt` keeps
    whatever of the job still waits on a request from acting once it returns."""

    def __init__(self, runs: list[tuple[Store, str, float]]):
        self.runs = list(runs)
        for _, run, _ in self.runs:
            _LIVE_RUNS.add(run)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._renewed: dict[str, float] = {}  # run -> monotonic time of its last renewal
        self._failure: dict[str, str] = {}  # run -> why its last renewal failed
        interval = min((timeout for _, _, timeout in self.runs), default=DEFAULT_LEASE_TIMEOUT) / 4
        self._thread = threading.Thread(
            target=self._loop, args=(interval,), name="shardwright-lease", daemon=True
        )

    def __enter__(self) -> Renewer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(wait=not isinstance(exc[1], LeaseUnrenewed))

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop renewing; `wait` for a renewal under way (not once the store stopped
        answering: the thread is a daemon, left to its request)."""
        self._stop.set()
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def check(self) -> None:
        """Raise LeaseUnrenewed once a lease this process holds has gone unrenewed for too
        long (counted from when it was taken, or last renewed)."""
        now = time.monotonic()
        with self._lock:
            renewed = dict(self._renewed)
            failures = dict(self._failure)
        late = []
        for store, run, timeout in self.runs:
            taken = _TAKEN.get(run)
            if taken is not None:
                since = now - max(taken, renewed.get(run, taken))
                if since > timeout * UNRENEWED_STOP_SHARE:
                    late.append((store, run, timeout, since))
        if late:
            store, run, timeout, since = late[0]
            why = failures.get(run, "its renewal has not returned")
            raise LeaseUnrenewed(
                f"{store.url}: this host has not renewed the job's lease for {since:.0f} s "
                f"({why}); the job stops now, before the lease's timeout ({timeout:.0f} s) "
                "lets another job take the destination over. The shards stored so far are "
                "kept: once this host reaches the store again, continue with {resume}",
                resume=True,
            )

    def held(self) -> bool:
        """Whether this process holds the lease of any of these runs (taken, not released)."""
        return any(run in _TAKEN for _, run, _ in self.runs)

    def halt(self) -> None:
        """The job stopped, its coordinator perhaps still waiting on a request: from now on
        this process renews nothing and makes no request for its runs."""
        self.stop(wait=False)
        for _, run, _ in self.runs:
            halt(run, "the job stopped: its lease went unrenewed; no more requests for it")

    def _loop(self, interval: float) -> None:
        active = list(self.runs)
        held: set[str] = set()
        while active and not self._stop.wait(interval):
            for entry in list(active):
                store, run, _ = entry
                asked = time.monotonic()
                try:
                    found = current_lease(store)
                    if self._stop.is_set():  # stopped while it asked: no heartbeat after
                        return
                    if found is not None and found[1] is not None and found[1].run == run:
                        beat(store, run)
                        held.add(run)
                        self._renewed_at(run, asked)
                    elif run in held:  # released at the job's end, or taken over
                        active.remove(entry)
                        _LIVE_RUNS.discard(run)
                        _TAKEN.pop(run, None)
                        with self._lock:
                            self._renewed.pop(run, None)
                except OSError as exc:  # a store failure: try again next round
                    with self._lock:
                        self._failure[run] = str(exc).splitlines()[0] if str(exc) else repr(exc)

    def _renewed_at(self, run: str, asked: float) -> None:
        with self._lock:
            self._renewed[run] = max(self._renewed.get(run, asked), asked)
            self._failure.pop(run, None)


LEASE_POLL_SECONDS = 5.0  # how often a job waiting for a lease looks again


def acquire_waiting(lease: Lease, wait: float, break_lease: bool) -> str | None:
    """The lease, waiting up to `wait` seconds for another job's to go; a destination that
    cannot take objects at all (a missing bucket, bad credentials, a read-only bucket) shows
    here, at the job's first write, as one error naming it."""
    url = lease.store.url
    deadline = time.monotonic() + wait
    while True:
        try:
            return lease.acquire(break_lease=break_lease)
        except LeaseHeld as held:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            waiting_for = held.holder or "a lease that cannot be read"
            print(f"shardwright: waiting up to {left:.0f} s for the lease on {url}, held by "
                  f"{waiting_for}", file=sys.stderr)  # fmt: skip
            time.sleep(min(LEASE_POLL_SECONDS, left))
        except FileNotFoundError as exc:
            if lease.store.is_local:
                raise
            raise StoreError(f"cannot write to {url}: the bucket does not exist ({exc})") from None
        except StoreError as exc:
            raise StoreError(f"cannot write to {url}: {exc}") from None
