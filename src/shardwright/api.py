"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any

from shardwright.additions import plan_addition
from shardwright.common.flags import command_line_fields
from shardwright.errors import LeaseHeld, OptionError, PlanError
from shardwright.jobs.pending import TopPlan
from shardwright.lifecycle.destination import check_plan_places
from shardwright.lifecycle.manifest import Manifest
from shardwright.lifecycle.run_options import RunOptions, split_keywords
from shardwright.lifecycle.status import JobStatus, job_status
from shardwright.options import ConvertOptions
from shardwright.planning import plan_conversion
from shardwright.sources import Source
from shardwright.verification import verify

# What runs a job (Dask, the engines) is imported when a conversion is checked or run, the
# viewer when one is shown: `plan` and `verify` (and the command line's) import neither.
if TYPE_CHECKING:
    from shardwright.jobs.progress import Progress
    from shardwright.jobs.shard_stream import Node
    from shardwright.lifecycle.job import Job
    from shardwright.viewing.viewer import View

__all__ = [
    "ConvertOptions",
    "add_segment_properties",
    "LeaseHeld",
    "Manifest",
    "PendingConversion",
    "PlanError",
    "RunOptions",
    "check",
    "convert",
    "plan",
    "status",
    "verify",
]


def plan(
    source: str | Source,
    dest: str | None = None,
    options: ConvertOptions | None = None,
    *,
    overwrite: bool = False,
    **option_values: Any,
) -> TopPlan:
    """Decide everything about a conversion and write nothing; `print(plan.report())`.

    A mesh or skeleton directory (its `info` says which) gets an ObjectPlan; a volume a
    ConversionPlan, with its meshes / skeletons alongside when `with_meshes` /
    `with_skeletons` ask for them. Without `dest`, `source` is a dataset that exists and
    the plan adds to it in place (an AdditionPlan: `generate_meshes`, `generate_skeletons`,
    `segment_properties`, `mips`); with `overwrite`, as `convert(..., overwrite=True)` runs
    it: levels shardwright added are made again.
    """
    chosen = _options(options, option_values)
    if dest is None:
        if not isinstance(source, str):
            raise PlanError("an addition names the dataset it adds to by its path or URL")
        decided: TopPlan = plan_addition(source, chosen, overwrite=overwrite)
    else:
        decided = plan_conversion(source, dest, chosen)
    check_plan_places(decided)
    return decided


def convert(
    source: str | Source | TopPlan,
    dest: str | None = None,
    options: ConvertOptions | None = None,
    *,
    run: RunOptions | None = None,
    compute: bool = True,
    window: int | None = None,
    **values: Any,
) -> Manifest | PendingConversion:
    """Convert a volume to sharded output; returns the manifest (or, with `compute=False`, a
    `PendingConversion` whose `.compute()` runs the job). Without `dest`, add to the dataset
    at `source` in place (`generate_meshes=True`, `generate_skeletons=True`,
    `segment_properties=TABLE`, `mips=N`): nothing it has changes but its metadata document
    (`info`, or an OME-Zarr group's `zarr.json`), written last; returns the record of what
    was added.

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
    from shardwright.jobs import pending as jobs

    conversion, run_values = split_keywords(values)
    settings = (run or RunOptions()).updated(run_values)
    the_plan: TopPlan
    if isinstance(source, TopPlan):
        if conversion or options is not None:
            raise TypeError("convert(plan, ...) takes run options only: the plan is decided")
        the_plan = source
    else:
        the_plan = plan(source, dest, _options(options, conversion),
                        overwrite=settings.mode == "overwrite")  # fmt: skip
    jobs.require_local_gpu(the_plan, settings)
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
        from shardwright.jobs.submission import check_window

        check_window(window)  # before anything is written
        self.job = job
        self.window = window
        # The checks' requests, counted in the volume's manifest (its store is the job's).
        self.preflight_requests = job.datasets[0].store.requests.snapshot()

    @property
    def run(self) -> RunOptions:
        return self.job.run

    @property
    def plan(self) -> TopPlan:
        the_plan = self.job.plan
        assert isinstance(the_plan, TopPlan)
        return the_plan

    def nodes(self) -> list[Node]:
        """Every shard task this job would submit, in order, as far as the plan knows them
        (for inspection: a big job's list is big). Generated meshes and skeletons list their
        block tasks: their shard tasks follow from what the blocks find."""
        from shardwright.jobs import pending as jobs

        return jobs.job_nodes(self.job)

    def compute(self, **overrides: Any) -> Manifest:
        """Run the job and return its manifest; the run options given override convert's
        (where the job runs and what it shows; not what it does to DEST, checked already)."""
        from shardwright.jobs import pending as jobs

        settings = self._settings(overrides)
        return self._run(settings, jobs.shown(settings.progress))

    def submit(self, **overrides: Any) -> concurrent.futures.Future[Manifest]:
        """Start the job in a background thread of this process (which coordinates it);
        returns a future of its manifest. In a notebook the progress bar shows in the cell
        that called this."""
        from shardwright.jobs import pending as jobs

        settings = self._settings(overrides)
        shown = jobs.shown(settings.progress)  # made here: the widget shows in this cell
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
        from shardwright.jobs import pending as jobs

        return jobs.run_checked(
            self.job, self.plan, settings, progress, self.window, self.preflight_requests
        )

    def __dask_graph__(self) -> None:
        raise PlanError(
            "a pending conversion is not a Dask collection: the process that runs it "
            "coordinates the job (its lease, the manifest); call .compute() to run it here, "
            "or .submit() to run it in the background (dask.compute/dask.persist cannot)"
        )

    def __repr__(self) -> str:
        source = self.plan.source_url or "an array in memory"
        return f"<PendingConversion {source} -> {self.plan.dest}: call .compute()>"


def check(the_plan: TopPlan, run: RunOptions | None = None, **values: Any) -> Job:
    """Every refusal that needs no write: where each destination lies, whether another job
    is writing it, what it holds and whether this job may resume it (`run`, or run options by
    name). `convert` calls it first, once; the CLI prints the plan only after it passed."""
    from shardwright.jobs import pending as jobs

    return jobs.check_job(the_plan, (run or RunOptions()).updated(values))


def _options(options: ConvertOptions | None, values: dict[str, Any]) -> ConvertOptions:
    if options is not None and values:
        raise TypeError("pass either a ConvertOptions or keyword options, not both")
    _refuse_flag_spellings(values)
    return options or ConvertOptions(**values)


def _refuse_flag_spellings(values: dict[str, Any]) -> None:
    """A keyword spelled as the command line's flag (`relationship=` for `--relationship`,
    whose keyword is `relationships=`) is refused naming the keyword, in the form it takes,
    not as a bare TypeError."""
    for field, flag in command_line_fields(ConvertOptions):
        key = flag.name.removeprefix("--").replace("-", "_")
        if key == field.name or key not in values:
            continue
        given = values[key]
        if flag.switch is not None:
            wanted = flag.switch
        elif flag.repeat:
            wanted = list(given) if isinstance(given, list | tuple) else [given]
        else:
            wanted = given
        each = f" (a list, one {flag.metavar or 'value'} each)" if flag.repeat else ""
        raise OptionError(f"{key}= is the command line's {flag.name}; in Python it is "
                          f"{{{field.name}}}{each}", **{field.name: wanted})  # fmt: skip


def status(dest: str, storage_options: dict[str, Any] | None = None) -> JobStatus:
    """Where the job writing `dest` stands (running, stopped, finished; shards, bytes, rate,
    its companions), read from what jobs write anyway: what `shardwright status DEST` prints
    is `.summary()`, its `--json` `.to_json()`."""
    return job_status(dest, storage_options)


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
    from shardwright.viewing.viewer import open_view

    return open_view(destinations, host, port, storage_options=storage_options).start()


def add_segment_properties(
    dest: str,
    table: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    source_storage_options: dict[str, Any] | None = None,
    **run_values: Any,
) -> Manifest:
    """Add segment properties (`table`: a .csv or .parquet path or URL, or a DataFrame: `id`,
    then `label`, `description`, `tags`, numbers) to the precomputed segmentation at `dest`
    (ours or another tool's), as `convert(dest, segment_properties=...)` does; returns the
    record of what was added. Run options (`resume`, ...) by name."""
    from shardwright.sources.tables import segment_properties_of

    where = table if isinstance(table, str) else "the table"
    properties = segment_properties_of(table, source_storage_options, where)
    options = ConvertOptions(storage_options=storage_options or {})
    added = plan_addition(dest, options, properties)
    check_plan_places(added)
    values = {"scheduler": "sync", "progress": False, **run_values}
    manifest = convert(added, **values)
    assert isinstance(manifest, Manifest)
    return manifest
