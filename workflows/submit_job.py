"""Submit a conversion to a Dask cluster that is already running.

    python workflows/submit_job.py SOURCE DEST --scheduler tcp://scheduler:8786 \\
        --set encoding=jpeg --set chunk_size=[128,128,32]

The scheduler is --scheduler, else $DASK_SCHEDULER_ADDRESS: this script connects to it and
never starts a cluster of its own. It plans and checks here (nothing is written if the plan is
refused), prints the dashboard link, then coordinates the job: shard tasks go to the cluster
through a bounded window, with a progress line. With --detach the coordinator itself runs
as a task on a worker and this script exits; the job runs on (the manifest
shardwright-manifest.json appears in DEST when it is complete). The job holds DEST's lease
(one job per destination), renewed by whichever process coordinates it. SOURCE and DEST must
be reachable from the workers: object-store URLs, or paths on a shared file system.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from distributed import Client, fire_and_forget, worker_client

from shardwright import api


def _setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE for a shardwright ConvertOptions field; VALUE is JSON, else a string."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip().replace("-", "_"), tuple(parsed) if isinstance(parsed, list) else parsed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Submit a conversion to a running Dask cluster.")
    parser.add_argument("source")
    parser.add_argument("dest")
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
        help="address of the running scheduler (default: $DASK_SCHEDULER_ADDRESS)",
    )
    parser.add_argument("--format", choices=("precomputed", "zarr3"), default="precomputed")
    parser.add_argument(
        "--set",
        dest="settings",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a conversion option, e.g. encoding=jpeg, chunk_size=[64,64,64], "
        "target_shard_bytes=2000000000",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="keep sound shards of a killed run")
    mode.add_argument("--overwrite", action="store_true", help="replace what DEST holds")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="submit and exit; the job's coordinator runs as a task on the cluster",
    )
    parser.add_argument(
        "--lease-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long DEST's lease may go unrenewed before another job may take it over",
    )
    parser.add_argument("--verify", action="store_true", help="verify DEST against SOURCE after")
    args = parser.parse_args(argv)
    if not args.scheduler:
        parser.error("no scheduler: pass --scheduler ADDRESS or set DASK_SCHEDULER_ADDRESS")
    if args.detach and args.verify:
        parser.error("--verify waits for the job; it does not go with --detach")
    return args


def _coordinate_on_the_cluster(plan: Any, options: dict[str, Any]) -> dict[str, Any]:
    """A detached job's coordinator, run as a task on a worker: it submits the shard tasks
    from there (a worker's client, its thread seceded from the worker's pool) and, as the
    job's starter, renews DEST's lease until the manifest is written."""
    with worker_client() as client:
        manifest = api.convert(plan, client=client, progress=False, **options)
    assert isinstance(manifest, api.Manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = {"format": args.format, **dict(args.settings)}
    plan = api.plan(args.source, args.dest, **options)
    print(plan.report(), file=sys.stderr)
    job = dict(resume=args.resume, overwrite=args.overwrite, lease_timeout=args.lease_timeout)
    with Client(args.scheduler, timeout="60s") as client:
        workers = len(client.scheduler_info()["workers"])
        print(f"scheduler {args.scheduler}: {workers} workers", file=sys.stderr)
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        if args.detach:
            api.check(plan, client=client, resume=args.resume, overwrite=args.overwrite)
            future = client.submit(_coordinate_on_the_cluster, plan, job, pure=False)
            fire_and_forget(future)  # the scheduler keeps the job after this client leaves
            print(f"submitted {future.key}; {args.dest} is complete once it holds its manifest")
            return 0
        manifest = api.convert(plan, client=client, **job)
        assert isinstance(manifest, api.Manifest)
    totals = manifest.totals
    print(
        f"wrote {totals.shards} shards, {totals.chunks} chunks, {totals.bytes:,} bytes "
        f"to {args.dest} in {totals.seconds} s ({totals.resumed_shards} kept)"
    )
    if args.verify:
        report = api.verify(args.dest, against=args.source)
        print(report.summary())
        return 0 if report.ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
