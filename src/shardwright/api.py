"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from shardwright.cluster import runner, scheduler_address, wants_dashboard, workers_elsewhere
from shardwright.engine.gpu import cupy_module
from shardwright.errors import LeaseHeld, PlanError
from shardwright.graph import Node, shard_nodes
from shardwright.lifecycle.job import Job, mode_of
from shardwright.lifecycle.lease import DEFAULT_TIMEOUT
from shardwright.options import ConvertOptions
from shardwright.planning import ConversionPlan, ObjectPlan, plan_conversion
from shardwright.progress import Progress
from shardwright.sources import Source
from shardwright.store import Store
from shardwright.submission import check_window, run_job
from shardwright.verification import verify
from shardwright.viewer import View, open_view

__all__ = [
    "ConvertOptions",
    "LeaseHeld",
    "PendingConversion",
    "PlanError",
    "check",
    "convert",
    "plan",
    "verify",
]


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
    progress: bool | Progress = True,
    dashboard: bool | None = None,
    window: int | None = None,
    break_lease: bool = False,
    lease_timeout: float = DEFAULT_TIMEOUT,
    lease_wait: float = 0.0,
    **option_values: Any,
) -> dict[str, Any] | PendingConversion:
    """Convert a volume to sharded output; returns the manifest (or, with `compute=False`, a
    `PendingConversion` whose `.compute()` runs the job).

    `resume` continues the job that wrote DEST, keeping the shards its receipts prove;
    `overwrite` replaces a shardwright dataset in DEST (its objects go only once the new
    manifest is written). When the job runs it takes DEST's lease (one job per destination):
    `lease_timeout` is how long the lease may go unrenewed before another job may take it
    over, `lease_wait` how long to wait for another job's lease to be released or to expire
    (as a retried pod should), `break_lease` takes over a live one. The process that runs the
    job coordinates it and renews its lease: it begins each dataset, keeps at most `window`
    shard tasks on the cluster at once (default: a few per worker thread) and writes the
    manifest last. `progress`: show shards, bytes, rate and time left (or a `Progress` of
    your own that receives every receipt). `dashboard`: whether a cluster started for the job
    serves the Dask dashboard (default: when progress is shown and the source holds at least
    4 GiB; smaller jobs end before anyone could open it, and its start costs about a second).
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
    pending = PendingConversion(job, resume=job.mode == "resume", window=window)
    if not compute:
        return pending
    return pending.compute(
        scheduler=scheduler,
        workers=workers,
        client=client,
        progress=progress,
        dashboard=dashboard,
    )


class PendingConversion:
    """A checked conversion that has not run: nothing is written until it is started.

    `compute()` runs it (on the scheduler or client given there, else the default local
    cluster) and returns the manifest; `submit()` starts it in the background and returns a
    future of the manifest. The process that runs it coordinates the job and holds its
    leases until the end.
    """

    def __init__(self, job: Job, *, resume: bool, window: int | None) -> None:
        check_window(window)  # before anything is written
        self.job = job
        self.resume = resume
        self.window = window
        # The checks' requests, counted in the volume's manifest (its store is the job's).
        self.preflight_requests = job.datasets[0].store.requests.snapshot()

    @property
    def plan(self) -> ConversionPlan | ObjectPlan:
        the_plan = self.job.plan
        assert isinstance(the_plan, ConversionPlan | ObjectPlan)
        return the_plan

    def nodes(self) -> list[Node]:
        """Every shard task this job would submit, in order (for inspection: a big job's
        list is big)."""
        return [n for d in self.job.datasets for n in shard_nodes(d.plan, "inspect")]

    def compute(
        self,
        *,
        scheduler: str | None = None,
        workers: int | None = None,
        client: Any = None,
        progress: bool | Progress = True,
        dashboard: bool | None = None,
    ) -> dict[str, Any]:
        """Run the job and return its manifest (`dashboard` as for `convert`)."""
        return self._run(scheduler, workers, client, _progress(progress), dashboard)

    def submit(
        self,
        *,
        scheduler: str | None = None,
        workers: int | None = None,
        client: Any = None,
        progress: bool | Progress = True,
        dashboard: bool | None = None,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Start the job in a background thread of this process (which coordinates it);
        returns a future of its manifest. In a notebook the progress bar shows in the cell
        that called this."""
        shown = _progress(progress)
        runs = concurrent.futures.ThreadPoolExecutor(1, "shardwright-job")
        future = runs.submit(self._run, scheduler, workers, client, shown, dashboard)
        runs.shutdown(wait=False)
        return future

    def _run(
        self,
        scheduler: str | None,
        workers: int | None,
        client: Any,
        progress: Progress,
        dashboard: bool | None,
    ) -> dict[str, Any]:
        gpu = self.plan.options.engine == "gpu"
        source_bytes = sum(d.plan.source_bytes for d in self.job.datasets)
        try:
            with runner(
                scheduler=scheduler,
                workers=workers,
                client=client,
                dashboard=wants_dashboard(dashboard, source_bytes, progress.enabled),
                gpu=gpu,
            ) as tasks:
                return run_job(
                    self.job,
                    tasks,
                    resume=self.resume,
                    window=self.window,
                    progress=progress,
                    preflight_requests=self.preflight_requests,
                )
        except BaseException:
            self.job.release()  # a job that failed gives its leases back (a finished one did)
            raise

    def __repr__(self) -> str:
        source = self.plan.source_url or "an array in memory"
        return f"<PendingConversion {source} -> {self.plan.dest}: call .compute()>"


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


def _progress(progress: bool | Progress) -> Progress:
    return progress if isinstance(progress, Progress) else Progress(enabled=progress)


def _options(options: ConvertOptions | None, values: dict[str, Any]) -> ConvertOptions:
    if options is not None and values:
        raise TypeError("pass either a ConvertOptions or keyword options, not both")
    return options or ConvertOptions(**values)


def view(*destinations: str, host: str = "127.0.0.1", port: int = 0) -> View:
    """Serve converted datasets with the Neuroglancer client, in the background, and return
    the running view: `.url` opens them all (in Jupyter the view shows as a link);
    `.close()` stops serving. Needs the `view` extra (the `neuroglancer` package's client)."""
    return open_view(destinations, host, port).start()
