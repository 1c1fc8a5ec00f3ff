"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from shardwright.engine.engines import engine_for
from shardwright.engine.gpu import cupy_module
from shardwright.errors import NAMED, JobFailed, LeaseHeld, LeaseUnrenewed, PlanError
from shardwright.jobs.cluster import (
    chosen_client,
    runner,
    scheduler_address,
    wants_dashboard,
    workers_elsewhere,
)
from shardwright.jobs.progress import Progress
from shardwright.jobs.shard_stream import Node, shard_nodes
from shardwright.jobs.submission import check_window, run_job
from shardwright.lifecycle.job import Job
from shardwright.manifest import Manifest
from shardwright.options import ConvertOptions
from shardwright.planning import GENERATED, ConversionPlan, ObjectPlan, plan_conversion
from shardwright.planning.text import human_bytes
from shardwright.run_options import RunOptions, split_keywords
from shardwright.sources import Source
from shardwright.store import Store
from shardwright.verification import verify
from shardwright.viewer import View, open_view

__all__ = [
    "ConvertOptions",
    "LeaseHeld",
    "Manifest",
    "PendingConversion",
    "PlanError",
    "RunOptions",
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
    run: RunOptions | None = None,
    compute: bool = True,
    window: int | None = None,
    **values: Any,
) -> Manifest | PendingConversion:
    """Convert a volume to sharded output; returns the manifest (or, with `compute=False`, a
    `PendingConversion` whose `.compute()` runs the job).

    Keyword arguments are conversion options (`ConvertOptions`: what is written) or run
    options (`RunOptions`: how the job runs), by name; `options` and `run` give either whole.
    Among the run options: `resume` continues the job that wrote DEST, keeping the shards its
    receipts prove; `overwrite` replaces a shardwright dataset in DEST (its objects go only
    once the new manifest is written). When the job runs it takes DEST's lease (one job per
    destination): `lease_timeout` is how long the lease may go unrenewed before another job
    may take it over, `lease_wait` how long to wait for another job's lease to be released or
    to expire (as a retried pod should), `break_lease` takes over a live one. `client`,
    `scheduler`, `workers`: where the shard tasks run. `progress`: show shards, bytes, rate
    and time left (or a `Progress` of your own that receives every receipt). `dashboard`:
    whether a cluster started for the job serves the Dask dashboard (default: when progress
    is shown and the source holds at least 4 GiB). `wait_for_workers`: how long a cluster with
    no worker may keep the job waiting (None: as long as it takes, said every 30 s). The
    process that runs the job coordinates it and renews its lease: it keeps at most `window`
    shard tasks on the cluster at once (default: a few per worker thread) and writes the
    manifest last.
    """
    conversion, run_values = split_keywords(values)
    settings = (run or RunOptions()).updated(run_values)
    the_plan: ConversionPlan | ObjectPlan
    if isinstance(source, ConversionPlan | ObjectPlan):
        if conversion or options is not None:
            raise TypeError("convert(plan, ...) takes run options only: the plan is decided")
        the_plan = source
    else:
        if dest is None:
            raise PlanError("convert needs a destination")
        the_plan = plan(source, dest, _options(options, conversion))
    gpu = isinstance(the_plan, ConversionPlan) and engine_for(the_plan).gpu
    here = chosen_client(settings.scheduler, settings.client) is None
    if gpu and here and scheduler_address(settings.scheduler) is None:
        cupy_module()  # this machine runs the GPU workers: it must have a GPU
    pending = PendingConversion(check(the_plan, settings), window=window)
    return pending.compute() if compute else pending


class PendingConversion:
    """A checked conversion that has not run: nothing is written until it is started.

    `compute()` runs it with the run options `convert(...)` was given (client, scheduler,
    workers, progress, dashboard, ...; each may be overridden here, by name) and returns the
    manifest; `submit()` starts it in the background and returns a future of the manifest.
    The process that runs it coordinates the job and holds its leases until the end, so it is
    not a Dask collection: `dask.compute(pending)` and `dask.persist(pending)` raise, pointing
    here.
    """

    def __init__(self, job: Job, *, window: int | None = None) -> None:
        check_window(window)  # before anything is written
        self.job = job
        self.window = window
        # The checks' requests, counted in the volume's manifest (its store is the job's).
        self.preflight_requests = job.datasets[0].store.requests.snapshot()

    @property
    def run(self) -> RunOptions:
        return self.job.run

    @property
    def plan(self) -> ConversionPlan | ObjectPlan:
        the_plan = self.job.plan
        assert isinstance(the_plan, ConversionPlan | ObjectPlan)
        return the_plan

    def nodes(self) -> list[Node]:
        """Every shard task this job would submit, in order, as far as the plan knows them
        (for inspection: a big job's list is big). Generated meshes and skeletons list their
        block tasks: their shard tasks follow from what the blocks find."""
        return [
            n
            for d in self.job.datasets
            for n in shard_nodes(d.plan, "inspect")
            if isinstance(n, Node)
        ]

    def compute(self, **overrides: Any) -> Manifest:
        """Run the job and return its manifest; the run options given override convert's
        (where the job runs and what it shows; not what it does to DEST, checked already)."""
        settings = self._settings(overrides)
        return self._run(settings, _progress(settings.progress))

    def submit(self, **overrides: Any) -> concurrent.futures.Future[Manifest]:
        """Start the job in a background thread of this process (which coordinates it);
        returns a future of its manifest. In a notebook the progress bar shows in the cell
        that called this."""
        settings = self._settings(overrides)
        shown = _progress(settings.progress)  # made here: the widget shows in this cell
        runs = concurrent.futures.ThreadPoolExecutor(1, "shardwright-job")
        future = runs.submit(self._run, settings, shown)
        runs.shutdown(wait=False)
        return future

    def _settings(self, overrides: dict[str, Any]) -> RunOptions:
        checked = {"resume", "overwrite", "break_lease", "lease_timeout", "lease_wait"}
        fixed = sorted(checked & set(overrides))
        if fixed:
            raise TypeError(
                f"{', '.join(fixed)}: decided when the job was checked; give them to convert()"
            )
        return self.run.updated(overrides)

    def _run(self, settings: RunOptions, progress: Progress) -> Manifest:
        gpu = isinstance(self.plan, ConversionPlan) and engine_for(self.plan).gpu
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
                holds_gil=any(d.plan.dataset == GENERATED for d in self.job.datasets),
            ) as tasks:
                try:
                    return run_job(
                        self.job,
                        tasks,
                        resume=self.job.mode == "resume",
                        window=self.window,
                        progress=progress,
                        preflight_requests=self.preflight_requests,
                    )
                except Exception as exc:
                    if type(exc).__name__ == "KilledWorker":  # distributed's, not imported here
                        raise lost_workers(exc, self.plan, tasks) from exc
                    raise
        except LeaseUnrenewed:
            raise  # the store does not answer this host: its leases run out by themselves
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
    key = str(getattr(exc, "task", "") or "")  # shard-<shard key>-<job token> (shard_stream)
    shard = key.removeprefix("shard-").rsplit("-", 1)[0] or "of a shard"
    memory = f"each worker may hold {human_bytes(limit)}" if limit else "the workers' memory"
    needs = f"; the plan's peak per task is {human_bytes(peak)}" if peak else ""
    deaths = getattr(exc, "allowed_failures", None)
    times = f"{deaths + 1} times" if isinstance(deaths, int) else "again and again"
    return JobFailed(
        f"the workers running shard task {shard} died {times} (a worker process that dies is "
        f"most often out of memory: {memory}{needs}, and every thread of a worker runs a "
        "task at once). Lower {memory_budget}, or start fewer {workers} (more memory each), "
        "then continue with the same command and {resume}",
        memory_budget=NAMED,
        workers=NAMED,
        resume=True,
    )


def check(
    the_plan: ConversionPlan | ObjectPlan, run: RunOptions | None = None, **values: Any
) -> Job:
    """Every refusal that needs no write: where each destination lies, whether another job
    is writing it, what it holds and whether this job may resume it (`run`, or run options by
    name). `convert` calls it first, once; the CLI prints the plan only after it passed."""
    settings = (run or RunOptions()).updated(values)
    store = Store(the_plan.dest, the_plan.options.storage_options)
    if store.is_process_local and workers_elsewhere(settings.scheduler, settings.client):
        raise PlanError(
            f"{store.url} lives in this process; workers in other processes cannot write "
            "it: use {scheduler} local, threads or sync with memory:// destinations",
            scheduler=NAMED,
        )
    job = Job(the_plan, settings)
    job.check()
    return job


def _progress(progress: bool | Progress) -> Progress:
    return progress if isinstance(progress, Progress) else Progress(enabled=progress)


def _options(options: ConvertOptions | None, values: dict[str, Any]) -> ConvertOptions:
    if options is not None and values:
        raise TypeError("pass either a ConvertOptions or keyword options, not both")
    return options or ConvertOptions(**values)


def view(
    *destinations: str,
    host: str = "127.0.0.1",
    port: int = 0,
    storage_options: dict[str, Any] | None = None,
) -> View:
    """Show datasets (ours, other tools', sources Neuroglancer reads; local ones served from
    here in the background, remote ones read where they are: `storage_options` reaches them)
    with the Neuroglancer client and return the running view: `.url` opens them all (in
    Jupyter the view shows as a link), `.app_link` in any Neuroglancer; `.close()` stops
    serving. Needs the `view` extra (the `neuroglancer` package's client)."""
    return open_view(destinations, host, port, storage_options=storage_options).start()
