"""Command line front end: thin, it calls the same functions a notebook calls."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from shardwright.cli import outcomes
from shardwright.cli.parser import (
    build_parser,
    commands_listing,
    options_from,
    run_options_from,
    subparser,
)
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import ShardwrightError, ShardwrightWarning
from shardwright.jobs import logs, stops
from shardwright.lifecycle.run_options import flag_wording


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """Run one command. `own_process`: this process exists for this command alone (the
    console script), so objects alive at the start may be frozen for its whole life.

    What it returns (the exit status): 0 done; 1 the job failed (its cluster lost it); 2 a
    problem the message names (ours, or an OS error a user can act on); 130 / 143 stopped by
    Ctrl-C / SIGTERM (the job's lease released: `--resume` continues it); 141 the reader of
    stdout went away. Anything else is a bug: its traceback, and a line saying so.
    """
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else list(argv)):  # bare: what it can do
        print(commands_listing(parser))
        return 0
    args, unknown = parser.parse_known_args(argv)
    if getattr(args, "dest", "") is None and unknown and not unknown[0].startswith("-"):
        args.dest = unknown.pop(0)  # convert's DEST after options: argparse left it over
    if unknown:  # named by the subcommand's parser, which knows the options meant
        command = subparser(parser, args.command)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.warnings = _HeldWarnings(args.command)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    # What the lines this command prints tell the user to type: the console script as it was
    # started (a virtualenv's script may not be on PATH), `shardwright` when called from Python.
    args.program = outcomes.program() if own_process else "shardwright"
    debug = getattr(args, "debug", False)
    logs.configure(verbose=getattr(args, "verbose", False) or debug)
    try:
        with warnings.catch_warnings(), stops.stopped_by_signals():
            warnings.showwarning = args.warnings.hold
            code = _run(args, own_process)
        args.warnings.say()
        return code
    except BaseException as exc:  # noqa: BLE001 - each kind has its exit status and its line
        return outcomes.report(args.command, exc, debug=debug, resume=_resume_command(args),
                               stored=lambda: _stored(args))  # fmt: skip


def _resume_command(args: argparse.Namespace) -> str | None:
    """The command that continues an interrupted conversion."""
    if args.command != "convert":
        return None
    words = [w for w in args.argv if w not in ("--overwrite",)]
    more = [] if "--resume" in words else ["--resume"]
    return " ".join([args.program, shlex.join([*words, *more])])


def _stored(args: argparse.Namespace) -> str | None:
    """What a stopped conversion's destination holds, read from its journal as `status`
    reads it (so a task that journaled its receipt as the job stopped is counted, which the
    coordinator had not heard of); None before its tasks ran, or where it cannot be read (a
    second Ctrl-C meanwhile stops the reading)."""
    progress, dest = args.__dict__.get("progress"), args.__dict__.get("written")
    if progress is None or dest is None or not progress.tasks[1]:
        return None
    from shardwright.lifecycle.status import job_status

    try:
        return job_status(*dest).stored() or None
    except (OSError, ShardwrightError, KeyboardInterrupt, stops.Terminated):
        return None


class _HeldWarnings:
    """Our warnings, held until the job has passed its checks (a refused job prints its one
    error, nothing else), then said as one line each worded for the command line. Other
    warnings print as Python shows them."""

    def __init__(self, command: str):
        self.command = command
        self.held: list[str] = []

    def hold(self, message: Warning | str, category: type[Warning], filename: str,
             lineno: int, *_: object) -> None:  # fmt: skip
        if isinstance(message, ShardwrightWarning):
            self.held.append(message.render(flag_wording))
        else:
            print(warnings.formatwarning(message, category, filename, lineno), end="",
                  file=sys.stderr)  # fmt: skip

    def say(self) -> None:
        for line in self.held:
            print(f"shardwright {self.command}: warning: {line}", file=sys.stderr)
        self.held.clear()


def entry() -> int:
    """The `shardwright` console script and `python -m shardwright.cli`."""
    return main(own_process=True)


def _freeze_startup_objects() -> None:
    """Imports done (the API's and the job's it runs; distributed is imported later, where a
    cluster is needed), move what they built out of the cyclic collector's sight: those
    objects live until the process exits, and walking them again in each full collection
    during the job and in the final one at exit costs about a tenth of a second of a short
    conversion on two cores. Only the commands that run a job come here: the others import
    none of it."""
    from shardwright import api  # noqa: F401
    from shardwright.jobs import pending  # noqa: F401

    gc.freeze()


def _run(args: argparse.Namespace, own_process: bool = False) -> int:
    if args.command == "plan" or (args.command == "convert" and args.dry_run):
        return _plan(args)
    if args.command == "convert":
        if own_process:
            _freeze_startup_objects()
        return _convert(args)
    if args.command == "verify":
        return _verify(args)
    if args.command == "status":
        return _status(args)
    if args.command == "serve":
        from shardwright.viewing.serve import serve

        serve(args.directory, args.host, args.port, log=args.log)
        return 0
    if args.command == "view":
        return _view(args)
    if args.command == "demo":
        from shardwright.cli.demo import run_demo

        if own_process:
            _freeze_startup_objects()
        return run_demo(
            args.out,
            args.size,
            scheduler=_scheduler(args),
            workers=args.workers,
            program=args.program,
        )
    raise AssertionError(args.command)


def _scheduler(args: argparse.Namespace) -> str:
    """Where a command's job runs: as `--scheduler` says, else $DASK_SCHEDULER_ADDRESS, else
    `auto` (threads of this process for a small job, else a local cluster). A command is its
    own process: unlike the Python API, it never runs a job on a Dask client that happens to
    be current (in a test that calls `main`, say)."""
    return args.scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or "auto"


# The API (Dask among its imports) is imported once a command needs it: `--help` stays quick.
def _plan(args: argparse.Namespace) -> int:
    from shardwright import api

    plan = api.plan(args.source, args.dest, options_from(args),
                    overwrite=bool(getattr(args, "overwrite", False)))  # fmt: skip
    if getattr(args, "json", False):
        print(json.dumps(plan.describe(), indent=2))
    else:
        print(plan.report())
    return 0


def _convert(args: argparse.Namespace) -> int:
    from shardwright import api
    from shardwright.jobs.progress import Progress
    from shardwright.planning.text import counted
    from shardwright.sources import missing

    run = run_options_from(args)
    plan = api.plan(args.source, args.dest, options_from(args), overwrite=run.mode == "overwrite")
    # Checked once, before the plan is printed: what is refused prints its error alone.
    args.progress = Progress(enabled=run.progress)  # started: the job's tasks ran
    args.written = (plan.dest, plan.options.storage_options)  # what a stop line reads
    run = run.updated({"scheduler": _scheduler(args), "progress": args.progress})
    pending = api.convert(plan, run=run, compute=False)
    assert isinstance(pending, api.PendingConversion)
    args.warnings.say()
    if args.progress.enabled:
        print(plan.report(), file=sys.stderr)
    manifest = pending.compute()
    if manifest.dataset == DatasetKind.ADDITION:
        return _added(args, manifest)
    totals = manifest.totals
    unit = "segment" if manifest.dataset == DatasetKind.OBJECTS else "chunk"
    where = f" on {manifest.cluster}" if manifest.cluster else ""
    print(
        f"wrote {counted(totals.shards, 'shard')}, {counted(totals.chunks, unit)}, "
        f"{counted(totals.bytes, 'byte')} to {args.dest} in {totals.seconds} s "
        f"({totals.resumed_shards:,} kept from an earlier run){where}"
    )
    if totals.source_chunks_missing:
        print(
            f"{totals.source_chunks_missing} source chunk(s) were not stored and were written "
            f"as the source's fill value ({missing.fill_of(plan.source)}) "
            f"(first: {', '.join(totals.source_chunks_missing_examples)})"
        )
    _say_companions(manifest, "wrote")
    _say_kept_preparing(args.progress)
    if args.progress.enabled and "://" not in args.dest.removeprefix("file://"):
        print(f"view it: {args.program} view {shlex.quote(args.dest)}", file=sys.stderr)
    return 0


def _added(args: argparse.Namespace, manifest: Any) -> int:
    """What an addition says it added (its companions, its documents), and that the info
    names them."""
    from shardwright.planning.formats import driver
    from shardwright.planning.text import counted

    _say_companions(manifest, "added")
    _say_kept_preparing(args.progress)
    totals, plan = manifest.totals, manifest.plan
    levels = [str(level["key"]) for level in plan.get("levels", [])]
    if levels:
        stored = (
            f"{counted(totals.shards, 'shard')}, {counted(totals.chunks, 'chunk')}"
            if driver(manifest.format).reader.has_shards
            else counted(totals.shards, "chunk object")  # one object a chunk
        )  # fmt: skip
        print(f"added {stored}, {counted(totals.bytes, 'byte')} in levels {', '.join(levels)} "
              f"({totals.resumed_shards:,} kept from an earlier run)")  # fmt: skip
    named = [f"{k} -> {v}" for k, v in plan.get("adds", {}).items()]
    named += [f"level {key}" for key in levels]
    print(f"{args.source}/{plan.get('root', 'info')} names them ({', '.join(named)}); "
          f"nothing else there changed, in {totals.seconds} s")  # fmt: skip
    return 0


def _say_companions(manifest: Any, verb: str) -> None:
    """A line per companion (meshes, skeletons) the job wrote: shards, segments, bytes."""
    from shardwright.planning.text import counted

    for where, part in manifest.companions.items():
        present = "" if part.segments_present is None else f" of {part.segments_present:,} present"
        print(
            f"{verb} {counted(part.shards, 'shard')}, {counted(part.chunks, 'segment')}{present}, "
            f"{counted(part.bytes, 'byte')} to {where} "
            f"({part.resumed_shards:,} kept from an earlier run)"
        )


def _say_kept_preparing(progress: Any) -> None:
    """The preparing tasks (mesh blocks, table partitions) a resumed job kept: no manifest
    lists their spools, so only the job's own count says that they were not made again."""
    if progress.kept_preparing:
        print(f"kept {progress.kept_preparing:,} of {progress.preparing:,} {progress.unit} "
              "from an earlier run (not made again)")  # fmt: skip


def _view(args: argparse.Namespace) -> int:
    from shardwright.viewing.viewer import open_view

    view = open_view(
        args.dest,
        args.host,
        args.port,
        log=sys.stderr if args.log else None,
        storage_options=args.storage_options,
    )
    args.warnings.say()  # before serving, which lasts until Ctrl-C
    if args.screenshot:
        view.start()
        try:
            view.screenshot(args.screenshot)
        finally:
            view.close()
        print(f"wrote {args.screenshot}")
        return 0
    print(view.url, flush=True)
    print(f"in any Neuroglancer: {view.app_link}", file=sys.stderr)
    print(f"serving {len(view.layers)} dataset(s) from {view.data_server.url} (Ctrl-C to stop)",
          file=sys.stderr)  # fmt: skip
    try:  # a stop while the browser starts (webbrowser waits for its command) ends the view
        if args.open:
            _open_browser(view.url)
    except (KeyboardInterrupt, stops.Terminated):
        view.close()
        return 0
    view.serve()
    return 0


def _open_browser(url: str) -> None:
    import webbrowser

    if not webbrowser.open(url):
        print(
            "view: --open found no browser to start here (no display?): open the URL above in "
            "a browser that reaches this machine",
            file=sys.stderr,
        )


def _verify(args: argparse.Namespace) -> int:
    from shardwright import api

    report = api.verify(
        args.dest,
        args.against,
        full=args.full,
        sample=args.sample,
        source_axes=args.source_axes,
        source_scale=args.source_scale,
        storage_options=args.storage_options,
        source_storage_options=args.source_storage_options,
        timeout=args.timeout,
    )
    print(report.summary())
    return 0 if report.ok else 1


def _status(args: argparse.Namespace) -> int:
    from shardwright.lifecycle.status import job_status

    while True:
        status = job_status(args.dest, args.storage_options)
        if args.json:
            print(json.dumps(status.to_json(), indent=1), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[J", end="")  # the screen redrawn, as `watch` does
            print(status.summary(), flush=True)
        if not args.watch or status.state in ("finished", "stopped"):
            return 0
        time.sleep(args.watch)
