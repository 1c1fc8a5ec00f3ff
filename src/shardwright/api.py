"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

from typing import Any

from dask.delayed import Delayed

from shardwright.cluster import execute, scheduler_address, workers_elsewhere
from shardwright.engine.gpu import cupy_module
from shardwright.errors import LeaseHeld, PlanError
from shardwright.graph import build_graph
from shardwright.lifecycle.job import Job, mode_of
from shardwright.lifecycle.lease import DEFAULT_TIMEOUT
from shardwright.options import ConvertOptions
from shardwright.planning import ConversionPlan, ObjectPlan, plan_conversion
from shardwright.sources import Source
from shardwright.store import Store
from shardwright.verification import verify

__all__ = ["ConvertOptions", "LeaseHeld", "PlanError", "check", "convert", "plan", "verify"]


def plan(
    source: str | Source, dest: str, options: ConvertOptions | None = None, **option_values: Any
) -> ConversionPlan | ObjectPlan:
    """Decide everything about a conversion and write nothing; `print(plan.report())`.

    A mesh or skeleton directory (its `info` says which) gets an ObjectPlan; a volume a
    ConversionPlan, with its meshes / skeletons alongside when `with_meshes` /
    `with_skeletons` ask for them.
    """
    return plan_conversion(source, dest, _options(options, option_values))


def convert(
    source: str | Source | ConversionPlan | ObjectPlan,
    dest: str | None = None,
    options: ConvertOptions | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    compute: bool = True,
    progress: bool = True,
    break_lease: bool = False,
    lease_timeout: float = DEFAULT_TIMEOUT,
    lease_wait: float = 0.0,
    **option_values: Any,
) -> dict[str, Any] | Delayed:
    """Convert a volume to sharded output; returns the manifest (or a lazy Dask object).

    `resume` continues the job that wrote DEST, keeping the shards its receipts prove;
    `overwrite` replaces a shardwright dataset in DEST (its objects go only once the new
    manifest is written). When the job runs it takes DEST's lease (one job per destination):
    `lease_timeout` is how long the lease may go unrenewed before another job may take it
    over, `lease_wait` how long to wait for another job's lease to be released or to expire
    (as a retried pod should), `break_lease` takes over a live one. With `compute=False`
    nothing is written until the graph is computed; the lease is then renewed from the process
    that runs the job's first step until the graph's last step releases it.
    """
    the_plan: ConversionPlan | ObjectPlan
    if isinstance(source, ConversionPlan | ObjectPlan):
        the_plan = source
    else:
        if dest is None:
            raise PlanError("convert needs a destination")
        the_plan = plan(source, dest, _options(options, option_values))
    gpu = the_plan.options.engine == "gpu"
    if gpu and client is None and scheduler_address(scheduler) is None:
        cupy_module()  # this machine runs the GPU workers: it must have a GPU
    job = check(
        the_plan,
        resume=resume,
        overwrite=overwrite,
        scheduler=scheduler,
        client=client,
        break_lease=break_lease,
        lease_timeout=lease_timeout,
        lease_wait=lease_wait,
    )
    main, *companions = job.datasets
    graph = build_graph(
        the_plan,
        main.store,
        resume=job.mode == "resume",
        claim=main.claim,
        companions={d.plan.dest: d.claim for d in companions},
        preflight_requests=main.store.requests.snapshot(),  # the checks' (a new store's)
    )
    if not compute:
        return graph
    try:
        return execute(
            graph, scheduler=scheduler, workers=workers, client=client, progress=progress, gpu=gpu
        )
    except BaseException:
        job.release()  # a job that failed gives its leases back (a finished one did already)
        raise


def check(
    the_plan: ConversionPlan | ObjectPlan,
    *,
    resume: bool = False,
    overwrite: bool = False,
    scheduler: str | None = None,
    client: Any = None,
    break_lease: bool = False,
    lease_timeout: float = DEFAULT_TIMEOUT,
    lease_wait: float = 0.0,
) -> Job:
    """Every refusal that needs no write: where each destination lies, whether another job
    is writing it, what it holds and whether this job may resume it. `convert` calls it
    first; the CLI calls it before it prints the plan, so a refused destination shows its one
    error alone."""
    store = Store(the_plan.dest, the_plan.options.storage_options)
    if store.is_process_local and workers_elsewhere(scheduler, client):
        raise PlanError(
            f"{store.url} lives in this process; workers in other processes cannot write "
            "it: use --scheduler local, threads or sync with memory:// destinations"
        )
    job = Job(
        the_plan,
        mode=mode_of(resume=resume, overwrite=overwrite),
        lease_timeout=lease_timeout,
        lease_wait=lease_wait,
        break_lease=break_lease,
    )
    job.check()
    return job


def _options(options: ConvertOptions | None, values: dict[str, Any]) -> ConvertOptions:
    if options is not None and values:
        raise TypeError("pass either a ConvertOptions or keyword options, not both")
    return options or ConvertOptions(**values)
