"""Command line front end: thin, it calls the same functions a notebook calls."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence

from shardwright.options import ConvertOptions, command_line_fields, default_of, parse_xyz

DEFAULT_LEASE_TIMEOUT = 120.0  # lifecycle/lease.py's default (not imported: keeps start-up lean)


def _add_conversion_options(p: argparse.ArgumentParser) -> None:
    """SOURCE, DEST and a flag for every ConvertOptions field the command line offers."""
    p.add_argument(
        "source",
        help="a .npy file, zarr array, precomputed volume, TIFF file or "
        "directory/glob of slices, or file.h5#/dataset",
    )
    p.add_argument("dest", help="output directory or URL (path, file://, memory://, gs://, s3://)")
    for f, flag in command_line_fields():
        if flag.switch is not None:
            p.add_argument(
                flag.name,
                action="store_const",
                const=flag.switch,
                default=default_of(f),
                dest=f.name,
                help=flag.help,
            )
        else:
            p.add_argument(
                flag.name,
                type=flag.parse or str,
                choices=flag.choices,
                metavar=flag.metavar,
                default=default_of(f),
                dest=f.name,
                help=flag.help,
            )


def options_from(args: argparse.Namespace) -> ConvertOptions:
    """The ConvertOptions a `plan` or `convert` command line asks for."""
    return ConvertOptions(**{f.name: getattr(args, f.name) for f, _ in command_line_fields()})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardwright",
        description="Convert volumes to sharded Neuroglancer precomputed and sharded Zarr v3.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="print the plan of a conversion; writes nothing")
    _add_conversion_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable plan")

    c = sub.add_parser("convert", help="convert SOURCE to sharded output at DEST")
    _add_conversion_options(c)
    c.add_argument(
        "--scheduler",
        help="ADDRESS | local | processes | threads | sync (default: local, a distributed "
        "cluster of worker threads in this process; processes: one worker process per "
        "core; or $DASK_SCHEDULER_ADDRESS)",
    )
    c.add_argument("--workers", type=int, help="worker processes (threads) to start")
    c.add_argument(
        "--resume",
        action="store_true",
        help="continue the job that wrote DEST: keep every shard its receipts prove intact",
    )
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the shardwright dataset in DEST (never anything else); its objects go "
        "only once the new manifest is written",
    )
    c.add_argument(
        "--lease-timeout",
        type=float,
        default=DEFAULT_LEASE_TIMEOUT,
        metavar="SECONDS",
        help="how long this job's lease on DEST may go unrenewed before another job may take "
        "it over (default %(default)s)",
    )
    c.add_argument(
        "--lease-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for another job's lease on DEST to be released or to expire "
        "(a retried pod whose predecessor was killed); default: refuse at once",
    )
    c.add_argument(
        "--break-lease",
        action="store_true",
        help="take over DEST's lease even though its job seems alive (only when you know it "
        "has stopped)",
    )
    c.add_argument("--dry-run", action="store_true", help="same as `plan`")
    c.add_argument("--quiet", action="store_true", help="no progress bar, plan report or dashboard")

    v = sub.add_parser("verify", help="check DEST's shards (and voxels against a source)")
    v.add_argument("dest")
    v.add_argument("--against", metavar="SOURCE")
    v.add_argument("--full", action="store_true", help="compare every chunk, not a sample")
    v.add_argument("--sample", type=int, default=64, help="chunks to compare (default 64)")
    v.add_argument("--source-axes")
    v.add_argument("--source-scale")
    v.add_argument("--storage-options", type=json.loads, default={}, metavar="JSON")
    v.add_argument("--source-storage-options", type=json.loads, default={}, metavar="JSON")

    s = sub.add_parser("serve", help="serve a directory over HTTP with CORS and Range support")
    s.add_argument("directory")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)

    d = sub.add_parser("demo", help="make a demo volume, convert it both ways, verify")
    d.add_argument("--out", default="demo-output")
    d.add_argument("--size", type=parse_xyz(int), default=(512, 512, 128), metavar="X,Y,Z")
    d.add_argument("--scheduler")
    d.add_argument("--workers", type=int)
    return parser


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """Run one command. `own_process`: this process exists for this command alone (the
    console script), so objects alive at the start may be frozen for its whole life."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args, own_process)
    except (ValueError, OSError) as exc:
        print(f"shardwright {args.command}: error: {exc}", file=sys.stderr)
        return 2


def entry() -> int:
    """The `shardwright` console script and `python -m shardwright.cli`."""
    return main(own_process=True)


def _freeze_startup_objects() -> None:
    """Imports done (the API's, and distributed: every scheduler choice loads it), move what
    they built out of the cyclic collector's sight: those objects live until the process
    exits, and walking them again in each full collection during the job and in the final one
    at exit costs about a tenth of a second of a short conversion on two cores."""
    import distributed  # noqa: F401

    from shardwright import api  # noqa: F401

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
    if args.command == "serve":
        from shardwright.serve import serve

        serve(args.directory, args.host, args.port)
        return 0
    if args.command == "demo":
        from shardwright.demo import run_demo

        if own_process:
            _freeze_startup_objects()
        return run_demo(args.out, args.size, scheduler=args.scheduler, workers=args.workers)
    raise AssertionError(args.command)


# The API (Dask among its imports) is imported once a command needs it: `--help` stays quick.
def _plan(args: argparse.Namespace) -> int:
    from shardwright import api

    plan = api.plan(args.source, args.dest, options_from(args))
    if getattr(args, "json", False):
        print(json.dumps(plan.describe(), indent=2))
    else:
        print(plan.report())
    return 0


def _convert(args: argparse.Namespace) -> int:
    from shardwright import api

    plan = api.plan(args.source, args.dest, options_from(args))
    # What is refused is refused before the plan is printed.
    api.check(
        plan,
        resume=args.resume,
        overwrite=args.overwrite,
        scheduler=args.scheduler,
        break_lease=args.break_lease,
        lease_wait=args.lease_wait,
    )
    if not args.quiet:
        print(plan.report(), file=sys.stderr)
    manifest = api.convert(
        plan,
        resume=args.resume,
        overwrite=args.overwrite,
        scheduler=args.scheduler,
        workers=args.workers,
        progress=not args.quiet,
        break_lease=args.break_lease,
        lease_timeout=args.lease_timeout,
        lease_wait=args.lease_wait,
    )
    assert isinstance(manifest, dict)
    totals = manifest["totals"]
    unit = "segments" if "object_type" in manifest["plan"] else "chunks"
    print(
        f"wrote {totals['shards']} shards, {totals['chunks']} {unit}, "
        f"{totals['bytes']:,} bytes to {args.dest} in {totals['seconds']} s "
        f"({totals['resumed_shards']} kept from an earlier run)"
    )
    for where, part in manifest.get("companions", {}).items():
        print(
            f"wrote {part['shards']} shards, {part['chunks']} segments, "
            f"{part['bytes']:,} bytes to {where} "
            f"({part['resumed_shards']} kept from an earlier run)"
        )
    return 0


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
    )
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(entry())
