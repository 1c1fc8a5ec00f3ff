"""A conversion job around its graph: the checks, the leases and the datasets it writes.

In the process that starts a job, in this order: the read-only checks of every destination
(where it lies, what it holds, whether this job may resume it), the lease of every
destination, the same holding checks again under the leases (another job may have finished
in between), then the graph, whose stores carry this run. The leases are renewed while the
job runs; the graph's coordinator releases each one when its dataset is complete, and the
starting process releases whatever is left when it stops early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dask.delayed import Delayed

from shardwright.graph import build_graph
from shardwright.lifecycle import fingerprint as fingerprints
from shardwright.lifecycle.destination import Holding, check_holding, check_location, inspect
from shardwright.lifecycle.lease import DEFAULT_TIMEOUT, Lease, check_free
from shardwright.objects import ObjectPlan
from shardwright.plan import ConversionPlan
from shardwright.store import Store, StoreError

MODES = ("new", "resume", "overwrite")


@dataclass
class Dataset:
    """One destination of a job (a volume's, or one of its meshes' / skeletons')."""

    plan: ConversionPlan | ObjectPlan
    store: Store
    fingerprint: fingerprints.Fingerprint
    lease: Lease | None = None

    @property
    def job(self) -> str:
        return fingerprints.digest(self.fingerprint)

    @property
    def sources(self) -> list[tuple[str, dict[str, Any]]]:
        url = self.plan.source if isinstance(self.plan, ObjectPlan) else self.plan.source.url
        return [(url, self.plan.options.source_storage_options)]

    @property
    def run_store(self) -> Store:
        """The store as the graph writes it: through this job's run, fenced by its lease."""
        assert self.lease is not None
        return self.store.with_run(self.lease.job_run)


def mode_of(*, resume: bool, overwrite: bool) -> str:
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other; pass one")
    return "overwrite" if overwrite else "resume" if resume else "new"


class Job:
    def __init__(self, plan: ConversionPlan | ObjectPlan, *, mode: str):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
        self.plan = plan
        self.mode = mode
        plans = [plan, *getattr(plan, "companions", ())]
        self.datasets = [
            Dataset(p, Store(p.dest, p.options.storage_options), _fingerprint(p)) for p in plans
        ]

    @property
    def leases(self) -> list[Lease]:
        return [d.lease for d in self.datasets if d.lease is not None]

    def check(self, *, break_lease: bool = False) -> None:
        """Everything that can be refused without writing a byte (reads only): where each
        destination lies, whether another job is writing it, what it holds."""
        for dataset in self.datasets:
            check_location(dataset.plan.dest, dataset.store.storage_options, dataset.sources)
            holding = inspect(dataset.store)
            if holding.kind == "ours":  # a job writing it now is the first thing to say
                check_free(dataset.store, break_lease=break_lease)
            self._check_holding(dataset, holding)

    def _check_holding(self, dataset: Dataset, holding: Holding | None = None) -> None:
        check_holding(
            dataset.store,
            holding or inspect(dataset.store),
            mode=self.mode,
            job=dataset.job,
            fingerprint=dataset.fingerprint,
        )

    def acquire(self, *, break_lease: bool = False, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
        """Lease every destination, then check them again under the leases; returns the
        notices of leases taken over. On any failure, the leases taken are released."""
        notices = []
        try:
            for dataset in self.datasets:
                dataset.lease = Lease(dataset.store, dataset.job, timeout)
                notice = _acquire(dataset.lease, break_lease)
                if notice:
                    notices.append(notice)
            for dataset in self.datasets:
                self._check_holding(dataset)
        except BaseException:
            self.release()
            raise
        return notices

    def graph(self, *, preflight_requests: dict[str, int] | None = None) -> Delayed:
        main, *companions = self.datasets
        return build_graph(
            self.plan,
            main.run_store,
            resume=self.mode == "resume",
            replace=self.mode == "overwrite",
            fingerprint=main.fingerprint,
            companions={d.plan.dest: (d.run_store, d.fingerprint) for d in companions},
            preflight_requests=preflight_requests,
        )

    def release(self) -> None:
        """Give back every lease this job still holds (a finished dataset's coordinator has
        released its own already)."""
        for dataset in self.datasets:
            if dataset.lease is not None:
                dataset.lease.release()


def _acquire(lease: Lease, break_lease: bool) -> str | None:
    """The lease, or one error naming the destination when it cannot take objects at all
    (a missing bucket, bad credentials, a read-only bucket): the lease is the job's first
    write, so this is where such a destination shows."""
    url = lease.store.url
    try:
        return lease.acquire(break_lease=break_lease)
    except FileNotFoundError as exc:
        raise StoreError(f"cannot write to {url}: the bucket does not exist ({exc})") from None
    except StoreError as exc:
        raise StoreError(f"cannot write to {url}: {exc}") from None


def _fingerprint(plan: ConversionPlan | ObjectPlan) -> fingerprints.Fingerprint:
    if isinstance(plan, ObjectPlan):
        return fingerprints.objects_fingerprint(plan)
    return fingerprints.volume_fingerprint(plan)
