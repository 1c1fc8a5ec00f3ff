"""A conversion job and its destinations: the checks before it runs, the start when it runs.

Before the job runs, in the process that starts it, everything that can be refused without
writing is refused (`Job.check`): where each destination lies, whether another job is writing
it, what it holds and whether this job may resume it. Nothing is written then, not even for a
lazy graph (`compute=False`).

When the job runs, its coordinator's first step (`begin`, one per destination) takes the
destination's lease (waiting for it if asked), checks the destination again under the lease
(another job may have finished in between) and begins the job in the journal (withdrawing a
replaced dataset's manifest). The lease names the process that started the job as its owner,
and that process keeps it alive (`lease.Renewer`): a job lives as long as its starter, and a
killed CLI's lease is taken over at once on the same host. The run id is fixed when the graph
is built, so a retried coordinator step recognises its own lease. The coordinator's last step
releases the lease; a job that fails is released by its starter, or expires.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import Any

from shardwright.lifecycle import fencing, journal
from shardwright.lifecycle import fingerprint as fingerprints
from shardwright.lifecycle.addition import check_addition
from shardwright.lifecycle.destination import (
    Holding,
    check_holding,
    check_location,
    inspect,
    plan_sources,
)
from shardwright.lifecycle.lease import (
    Lease,
    Owner,
    Renewer,
    acquire_waiting,
    check_free,
    release_run,
)
from shardwright.lifecycle.run_options import DEFAULT_LEASE_TIMEOUT, RunOptions
from shardwright.lifecycle.runs import FencedStore, JobRun
from shardwright.planning import Plan
from shardwright.stores import Store, open_store


@dataclass(frozen=True)
class Claim:
    """What a job's coordinator needs to take its destination once the job runs."""

    mode: str
    fingerprint: fingerprints.Fingerprint
    run: str
    owner: Owner
    timeout: float = DEFAULT_LEASE_TIMEOUT
    wait: float = 0.0
    break_lease: bool = False
    planned: journal.Planned = journal.Planned()  # what it writes, as `status` counts it
    words: dict[str, str] = field(default_factory=dict)  # fingerprint.in_words

    @functools.cached_property
    def job(self) -> str:
        return fingerprints.digest(self.fingerprint)


@dataclass
class Dataset:
    """One destination of a job (a volume's, or one of its meshes' / skeletons')."""

    plan: Plan
    store: Store
    claim: Claim
    in_place: bool = False  # written inside the dataset it reads (an addition and its parts)

    @property
    def places(self) -> list[tuple[str, str]]:
        """(role, location): what the workers must reach, as the plan names them."""
        sources = [("source", url) for url, _ in self.sources]
        return [*sources, ("destination", self.plan.dest)]

    @property
    def sources(self) -> list[tuple[str, dict[str, Any]]]:
        return plan_sources(self.plan)


class Job:
    """A planned conversion with its run options (`run`: new, resume or overwrite; the lease's
    timeout and wait), before anything is written: `check` refuses what it must."""

    def __init__(self, plan: Plan, run: RunOptions):
        self.plan = plan
        self.run = run
        self.mode = mode = run.mode
        lease_timeout, lease_wait, break_lease = run.lease_timeout, run.lease_wait, run.break_lease
        self.break_lease = break_lease
        owner = Owner.this_process()
        self.datasets = [
            Dataset(
                p,
                open_store(p.dest, p.options.storage_options),
                Claim(
                    mode=mode,
                    fingerprint=_fingerprint(p),
                    run=uuid.uuid4().hex,
                    owner=owner,
                    timeout=lease_timeout,
                    wait=lease_wait,
                    break_lease=break_lease,
                    planned=_planned(p),
                    words=fingerprints.in_words(p),
                ),
                in_place=plan.in_place,
            )
            for p in [plan, *plan.companions]
        ]

    def check(self) -> None:
        """Everything that can be refused without writing a byte (reads only): where each
        destination lies, whether another job is writing it, what it holds."""
        for dataset in self.datasets:
            if dataset.plan.in_place:
                claim = dataset.claim
                check_addition(dataset.store, mode=self.mode, job=claim.job,
                               fingerprint=claim.fingerprint, words=claim.words,
                               wait=claim.wait, break_lease=self.break_lease)  # fmt: skip
                continue
            sources = [] if dataset.in_place else dataset.sources  # its own dataset's parts
            check_location(dataset.plan.dest, dataset.store.storage_options, sources)
            holding = inspect(dataset.store)
            if holding.kind == "ours" and not dataset.claim.wait:
                check_free(dataset.store, break_lease=self.break_lease)
            _check_holding(dataset.store, holding, dataset.claim)

    def renewer(self) -> Renewer:
        """What keeps this job's leases alive from this process, its owner."""
        return Renewer([(d.store, d.claim.run, d.claim.timeout) for d in self.datasets])

    def release(self) -> None:
        """Give back the leases this job's runs still hold (after a failure: a finished
        dataset's coordinator has released its own already)."""
        for dataset in self.datasets:
            release_run(dataset.store, dataset.claim.run)


def begin(store: Store, claim: Claim) -> tuple[JobRun, list[str]]:
    """The coordinator's first step for one destination (see the module's docstring); returns
    the run the job's writes carry (fenced by the lease) and the notices of a lease taken
    over."""
    lease = Lease(store, claim.job, claim.timeout, run=claim.run, owner=claim.owner)
    notice = acquire_waiting(lease, claim.wait, claim.break_lease)
    try:
        holding = inspect(store)
        if (holding.job or {}).get("run") != claim.run:  # not begun yet (this is no retry)
            _check_holding(store, holding, claim)
        run = fencing.fenced(lease.job_run, writes_new=claim.mode != "overwrite")
        journal.begin(
            FencedStore(store, run),
            claim.fingerprint,
            holding.manifest,
            replace=claim.mode == "overwrite",
            planned=claim.planned,
            words=claim.words,
        )
    except BaseException:
        lease.release()
        raise
    return run, [notice] if notice else []


def _check_holding(store: Store, holding: Holding, claim: Claim) -> None:
    check_holding(store, holding, mode=claim.mode, job=claim.job, fingerprint=claim.fingerprint,
                  words=claim.words)  # fmt: skip


def _planned(plan: Plan) -> journal.Planned:
    """The plan's shards apart from the tasks that run before them; the shards of a plan made
    from spools (meshes generated, a table's annotations) are an estimate until those ran."""
    preparing = plan.preparing_tasks
    return journal.Planned(
        shards=plan.shard_total - preparing,
        estimated=plan.spools,
        preparing=preparing,
        unit=plan.preparing_unit,
    )


def _fingerprint(plan: Plan) -> fingerprints.Fingerprint:
    return fingerprints.FINGERPRINTS[plan.dataset](plan)
