"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

from shardwright.cluster import (
    chosen_client,
    runner,
    scheduler_address,
    wants_dashboard,
    workers_elsewhere,
)
from shardwright.engine.gpu import cupy_module
from shardwright.errors import JobFailed, LeaseHeld, PlanError
from shardwright.graph import Node, shard_nodes
from shardwright.lifecycle.job import Job, mode_of
from shardwright.lifecycle.lease import DEFAULT_TIMEOUT
from shardwright.options import ConvertOptions
from shardwright.planning import ConversionPlan, ObjectPlan, plan_conversion
from shardwright.planning.text import human_bytes
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
    wait_for_workers: float | None = None,
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
    `wait_for_workers`: how long a cluster with no worker may keep the job waiting (None: as
    long as it takes, said every 30 s).
    """
    the_plan: ConversionPlan | ObjectPlan
    if isinstance(source, ConversionPlan | ObjectPlan):
        the_plan = source
    else:
        if dest is None:
            raise PlanError("convert needs a destination")
        the_plan = plan(source, dest, _options(options, option_values))
    gpu = the_plan.options.engine == "gpu"
    if gpu and chosen_client(scheduler, client) is None and scheduler_address(scheduler) is None:
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
    settings = RunSettings(scheduler, workers, client, progress, dashboard, wait_for_workers)
    pending = PendingConversion(job, resume=job.mode == "resume", window=window, run=settings)
    return pending.compute() if compute else pending


UNSET: Any = object()  # not given: the pending job's own setting applies


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Where and how a checked job runs, as `convert(...)` was given them; `.compute()` and
    `.submit()` override each one they are given. No scheduler and no client: a Dask client
    the user made current (`distributed.Client(...)` in a notebook) runs the job, as
    `dask.compute` would use it; without one, a local cluster started for the job."""

    scheduler: str | None = None
    workers: int | None = None
    client: Any = None
    progress: bool | Progress = True
    dashboard: bool | None = None
    wait_for_workers: float | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise PlanError(f"--workers must be a whole number of at least 1, got {self.workers!r}")
        if self.wait_for_workers is not None and not self.wait_for_workers >= 0:
            raise PlanError(f"--wait-for-workers must be seconds, got {self.wait_for_workers!r}")

    def overridden(self, **given: Any) -> RunSettings:
        return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not UNSET})


class PendingConversion:
    """A checked conversion that has not run: nothing is written until it is started.

    `compute()` runs it where `convert(...)` said (client, scheduler, workers, progress,
    dashboard; each may be overridden here) and returns the manifest; `submit()` starts it in
    the background and returns a future of the manifest. The process that runs it coordinates
    the job and holds its leases until the end, so it is not a Dask collection:
    `dask.compute(pending)` and `dask.persist(pending)` raise, pointing here.
    """

    def __init__(
        self, job: Job, *, resume: bool, window: int | None, run: RunSettings | None = None
    ) -> None:
        check_window(window)  # before anything is written
        self.job = job
        self.resume = resume
        self.window = window
        self.run = run or RunSettings()
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
        scheduler: Any = UNSET,
        workers: Any = UNSET,
        client: Any = UNSET,
        progress: Any = UNSET,
        dashboard: Any = UNSET,
    ) -> dict[str, Any]:
        """Run the job and return its manifest; what is given overrides `convert`'s."""
        settings = self.run.overridden(scheduler=scheduler, workers=workers, client=client,
                                       progress=progress, dashboard=dashboard)  # fmt: skip
        return self._run(settings, _progress(settings.progress))

    def submit(
        self,
        *,
        scheduler: Any = UNSET,
        workers: Any = UNSET,
        client: Any = UNSET,
        progress: Any = UNSET,
        dashboard: Any = UNSET,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Start the job in a background thread of this process (which coordinates it);
        returns a future of its manifest. In a notebook the progress bar shows in the cell
        that called this."""
        settings = self.run.overridden(scheduler=scheduler, workers=workers, client=client,
                                       progress=progress, dashboard=dashboard)  # fmt: skip
        shown = _progress(settings.progress)  # made here: the widget shows in this cell
        runs = concurrent.futures.ThreadPoolExecutor(1, "shardwright-job")
        future = runs.submit(self._run, settings, shown)
        runs.shutdown(wait=False)
        return future

    def _run(self, settings: RunSettings, progress: Progress) -> dict[str, Any]:
        gpu = self.plan.options.engine == "gpu"
        source_bytes = sum(d.plan.source_bytes for d in self.job.datasets)
        try:
            with runner(
                scheduler=settings.scheduler,
                workers=settings.workers,
                client=settings.client,
                dashboard=wants_dashboard(settings.dashboard, source_bytes, progress.enabled),
                gpu=gpu,
                announce=progress.enabled,
                wait_for_workers=settings.wait_for_workers,
            ) as tasks:
                try:
                    return run_job(
                        self.job,
                        tasks,
                        resume=self.resume,
                        window=self.window,
                        progress=progress,
                        preflight_requests=self.preflight_requests,
                    )
                except Exception as exc:
                    if type(exc).__name__ == "KilledWorker":  # distributed's, not imported here
                        raise lost_workers(exc, self.plan, tasks) from exc
                    raise
        except BaseException:
            self.job.release()  # a job that failed gives its leases back (a finished one did)
            raise

    def __dask_graph__(self) -> None:
        raise PlanError(
            "a pending conversion is not a Dask collection: the process that runs it "
            "coordinates the job (its lease, the manifest); call .compute() to run it here, "
            "or .submit() to run it in the background (dask.compute/dask.persist cannot)"
        )

    def __repr__(self) -> str:
        source = self.plan.source_url or "an array in memory"
        return f"<PendingConversion {source} -> {self.plan.dest}: call .compute()>"


def lost_workers(exc: Exception, plan: ConversionPlan | ObjectPlan, tasks: Any) -> JobFailed:
    """Workers that kept dying under one shard task, most often of memory: what it was, what
    the workers may hold and what the plan needs, and what to change."""
    limit = tasks.memory_limit() if hasattr(tasks, "memory_limit") else None
    peak = getattr(plan, "peak_task_bytes", None)
    key = str(getattr(exc, "task", "") or "")  # shard-<shard key>-<job token> (graph.py)
    shard = key.removeprefix("shard-").rsplit("-", 1)[0] or "of a shard"
    memory = f"each worker may hold {human_bytes(limit)}" if limit else "the workers' memory"
    needs = f"; the plan's peak per task is {human_bytes(peak)}" if peak else ""
    deaths = getattr(exc, "allowed_failures", None)
    times = f"{deaths + 1} times" if isinstance(deaths, int) else "again and again"
    return JobFailed(
        f"the workers running shard task {shard} died {times} (a worker process that dies is "
        f"most often out of memory: {memory}{needs}, and every thread of a worker runs a "
        "task at once). Lower --memory-budget, or start fewer --workers (more memory each), "
        "then continue with the same command and --resume"
    )


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
