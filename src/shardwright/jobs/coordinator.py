"""The coordinator's two steps for one dataset, run by the process that drives the job.

First (`begin_dataset`): take the destination and begin the job there (lifecycle/job.py:
the lease, the journal, a replaced dataset's manifest withdrawn), then write the metadata
(`info` / `zarr.json`), so every shard task runs after it. Last (`finish_dataset`): once every
shard is stored, the manifest from the receipts, written last; then what a replaced dataset
owned and this one did not reuse is removed, and the lease released.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence

from shardwright.additions import AdditionPlan
from shardwright.lifecycle import addition, journal, lease
from shardwright.lifecycle.job import Claim, begin
from shardwright.lifecycle.manifest import (
    CompanionTotals,
    Manifest,
    ReceiptTable,
    build_manifest,
    metadata_digests,
    metadata_text,
    write_manifest,
)
from shardwright.lifecycle.runs import CONTROL_DIR, FencedStore, JobRun, run_of
from shardwright.planning import Plan
from shardwright.stores import Store


def write_metadata(plan: Plan, store: Store) -> dict[str, int]:
    """The dataset's metadata objects (`info` or `zarr.json`; a zarr3 pyramid's level arrays
    and multiscales group). Returns the requests it made, for the manifest's totals."""
    before = store.requests.snapshot()
    for key, document in plan.metadata_documents():
        store.write_text(key, metadata_text(document))
    return store.requests.since(before)


@dataclasses.dataclass(frozen=True)
class Begun:
    """A dataset whose job has begun: the store its writes go through (carrying the job's
    run; none for a job without a claim, in tests of the engine alone), when it began and the
    requests made so far (the checks' and the first step's)."""

    plan: Plan
    store: Store
    started: float
    requests: list[dict[str, int]]


def begin_dataset(
    plan: Plan, store: Store, claim: Claim | None, preflight: dict[str, int] | None = None
) -> Begun:
    """The coordinator's first step for one dataset; `preflight`: the requests of the
    checks before it, for the manifest's totals."""
    started = time.time()
    before = store.requests.snapshot()
    run: JobRun | None = None
    if claim is not None:
        run, notices = (
            _begin_addition(plan, store, claim) if plan.in_place
            else begin(store, claim)
        )  # fmt: skip
        for notice in notices:
            print(f"shardwright: {notice}", file=sys.stderr)
    writer = FencedStore(store, run) if run is not None else store
    write_metadata(plan, writer)
    return Begun(plan, writer, started, [preflight or {}, store.requests.since(before)])


def finish_dataset(
    begun: Begun,
    receipts: ReceiptTable,
    companions: Sequence[CompanionTotals] = (),
    cluster: str | None = None,
) -> Manifest:
    """The coordinator's last step for one dataset, once every shard task has returned its
    receipt. Temporaries of shard writes that died with their worker are removed first:
    every shard is in place by now, so nothing still needs them. The last requests (cleanup,
    the manifest's own PUT) are not in the manifest's totals."""
    store = begun.store
    run = run_of(store)
    if begun.plan.in_place:
        assert isinstance(begun.plan, AdditionPlan)
        return addition.finish_addition(
            store,
            description=begun.plan.describe(),
            documents=begun.plan.documents,
            root=begun.plan.root,
            root_after=begun.plan.root_after,
            version=begun.plan.version,
            companions=list(companions),
            receipts=receipts,
            seconds=time.time() - begun.started,
            cluster=cluster,
        )
    store.remove_stale_temporaries(nested_marker=CONTROL_DIR)
    metadata = metadata_digests(begun.plan.metadata_documents())
    manifest = build_manifest(
        begun.plan.describe(),
        receipts,
        time.time() - begun.started,
        begun.requests,
        companions=companions,
        job=run.job if run is not None else None,
        metadata=metadata,
        cluster=cluster,
        dataset=begun.plan.dataset,
    )
    found = None
    if run is not None:  # found (reads only) before the manifest marks the job done
        stored = {shard.key for shard in manifest.shards} | set(metadata)
        found = journal.replaced(store, stored, set(receipts.keys()))
    write_manifest(store, manifest)
    if begun.plan.spools:  # every shard stored: spools done
        for key in store.list_keys(journal.EXCHANGE.rstrip("/")):
            store.delete(key)
        ours = f"{journal.CENSUS}{run.job}/" if run is not None else None
        for key in store.list_keys(journal.CENSUS.rstrip("/")):  # the replaced jobs' census
            if ours is not None and not key.startswith(ours):
                store.delete(key)
    if found is not None:
        journal.remove(store, found)
        lease.release(store)
    return manifest


def _begin_addition(plan: Plan, store: Store, claim: Claim) -> tuple[JobRun, list[str]]:
    """An addition's first step: the dataset's lease and the addition's record."""
    assert isinstance(plan, AdditionPlan)
    record = addition.Record(
        job=claim.job,
        run=claim.run,
        root=plan.root,
        before=plan.root_read,
        after_sha256=addition.sha256(plan.root_after),
        fingerprint=claim.fingerprint,
        options=claim.words,
        documents={key: addition.sha256(document) for key, document in plan.documents},
        level_shards={level.layout.level_key: level.shard_count for level in plan.new_levels},
    )
    return addition.begin_addition(
        store, job=claim.job, run=claim.run, owner=claim.owner, timeout=claim.timeout,
        wait=claim.wait, break_lease=claim.break_lease, record=record,
    )  # fmt: skip
