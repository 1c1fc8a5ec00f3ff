"""Lease fencing: a job writes its data objects only while its destination's lease names it.

`fenced(run)` is the run a job's store carries once it holds the lease (a `FencedStore`,
runs.py): before each data object (every key outside `.shardwright/`) the store asks the
fence, which reads the lease and raises LeaseLost once another job has taken it over, so a job
that lost its lease stops writing. The fence travels inside the run (`JobRun.fence`, pickled
by name with the store), so a worker's own store checks the same lease; the stores below know
nothing of leases.
"""

from __future__ import annotations

import dataclasses
import json

from shardwright.errors import LeaseLost
from shardwright.lifecycle.lease import Holder
from shardwright.lifecycle.runs import JobRun, run_of
from shardwright.stores import Store


def fenced(run: JobRun, writes_new: bool = False) -> JobRun:
    """`run`, its data writes checked against its lease first (and, `writes_new`, expected
    to find their keys absent: see runs.py)."""
    return dataclasses.replace(run, fence=check_lease, writes_new=writes_new)


def check_lease(store: Store) -> None:
    """Raise LeaseLost unless the destination's lease still names the store's run."""
    run = run_of(store)
    assert run is not None, "a fenced store carries its run"
    try:
        holder: Holder | None = Holder.from_json(json.loads(store.read(run.lease, small=True)))
    except (FileNotFoundError, ValueError):
        holder = None
    if holder is None or holder.run != run.run:
        raise LeaseLost(
            f"{store.url}: this job no longer holds the destination's lease "
            f"({run.lease}); another job took it over, so this one stops writing"
        )
