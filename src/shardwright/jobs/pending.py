"""A conversion between its plan and its run: checked (nothing written), then run from the
process that asked for it. The front ends (api.py, and through it cli/) come here for
both, so that what runs a job, and what happens to its leases when it fails, lives with the
job's other steps in jobs/.
"""

from __future__ import annotations

from shardwright.additions import AdditionPlan
from shardwright.engine.engines import engine_for
from shardwright.engine.gpu import cupy_module
from shardwright.errors import NAMED, LeaseUnrenewed, PlanError
from shardwright.jobs.cluster import (
    chosen_client,
    runner,
    scheduler_address,
    wants_dashboard,
    workers_elsewhere,
)
from shardwright.jobs.progress import Progress
from shardwright.jobs.shard_stream import Node, shard_nodes
from shardwright.jobs.submission import run_job
from shardwright.lifecycle.job import Job
from shardwright.lifecycle.manifest import Manifest
from shardwright.lifecycle.run_options import RunOptions
from shardwright.planning import AnnotationPlan, ConversionPlan, ObjectPlan
from shardwright.stores import backend_for

# What `plan_conversion` returns: a volume's plan, a mesh or skeleton directory's, a table's;
# and `plan_addition`: what is added to a dataset that exists.
TopPlan = ConversionPlan | ObjectPlan | AnnotationPlan | AdditionPlan


def check_job(the_plan: TopPlan, settings: RunOptions) -> Job:
    """Every refusal that needs no write (`api.check`): a destination in this process's
    memory that workers elsewhere could not write, then the job's own checks (its
    destinations, their leases, resume or overwrite)."""
    local = backend_for(the_plan.dest).is_process_local  # the URL says it: nothing opened
    if local and workers_elsewhere(settings.scheduler, settings.client):
        raise PlanError(
            f"{the_plan.dest.rstrip('/')} lives in this process; workers in other processes "
            "cannot write it: use {scheduler} local, threads or sync with memory:// "
            "destinations",
            scheduler=NAMED,
        )
    job = Job(the_plan, settings)
    job.check()
    return job


def require_local_gpu(the_plan: TopPlan, settings: RunOptions) -> None:
    """A GPU job whose cluster starts here runs its workers on this machine: it must have a
    GPU (refused before anything is checked or written)."""
    here = chosen_client(settings.scheduler, settings.client) is None
    if uses_gpu(the_plan) and here and scheduler_address(settings.scheduler) is None:
        cupy_module()


def uses_gpu(the_plan: TopPlan) -> bool:
    """Whether the job's shard tasks run on GPUs (a volume the GPU engine converts)."""
    return isinstance(the_plan, ConversionPlan) and engine_for(the_plan).gpu


def shown(progress: bool | Progress) -> Progress:
    """The progress a job shows: the one given, or a bar shown or not."""
    return progress if isinstance(progress, Progress) else Progress(enabled=progress)


def job_nodes(job: Job) -> list[Node]:
    """Every shard task the job would submit, in order, as far as its plans know them (for
    inspection: generated meshes and skeletons list their block tasks only)."""
    return [n for d in job.datasets for n in shard_nodes(d.plan, "inspect") if isinstance(n, Node)]


def run_checked(
    job: Job,
    the_plan: TopPlan,
    settings: RunOptions,
    progress: Progress,
    window: int | None = None,
    preflight_requests: dict[str, int] | None = None,
) -> Manifest:
    """Run a checked job where `settings` say (a cluster started for it is closed at its end)
    and return its manifest. A job that fails gives its leases back here, whatever stopped
    it, unless the store stopped answering this host: those leases run out by themselves."""
    source_bytes = sum(d.plan.source_bytes for d in job.datasets)
    peak = the_plan.peak_task_bytes if isinstance(the_plan, ConversionPlan) else None
    try:
        with runner(
            scheduler=settings.scheduler,
            workers=settings.workers,
            client=settings.client,
            dashboard=wants_dashboard(settings.dashboard, source_bytes, progress.enabled),
            gpu=uses_gpu(the_plan),
            announce=progress.enabled,
            wait_for_workers=settings.wait_for_workers,
            holds_gil=any(d.plan.holds_gil for d in job.datasets),
            peak_task_bytes=peak,
            source_bytes=source_bytes,
        ) as tasks:
            return run_job(
                job,
                tasks,
                resume=job.mode == "resume",
                window=window,
                progress=progress,
                preflight_requests=preflight_requests,
            )
    except LeaseUnrenewed:
        raise
    except BaseException:
        job.release()
        raise
