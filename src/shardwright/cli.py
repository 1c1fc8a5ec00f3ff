"""Command line front end: thin, it calls the same functions a notebook calls."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from typing import Any

from shardwright.options import COMPRESSIONS, DOWNSAMPLE_METHODS, FORMATS, ConvertOptions

SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
DEFAULT_LEASE_TIMEOUT = 120.0  # lifecycle/lease.py's default (not imported: keeps start-up lean)


def _xyz(kind: type) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        parts = text.split(",")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"expected three values x,y,z, got {text!r}")
        try:
            return tuple(kind(p) for p in parts)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad x,y,z value {text!r}: {exc}") from exc

    return parse


def _mips(text: str) -> int | str:
    """'auto' or a number of levels above the base."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of levels or 'auto', got {text!r}")
    return value


def _bytes(text: str) -> int:
    """'512M', '2G', '1.5GiB' or a plain number of bytes."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = SIZE_SUFFIXES.get(value[-1:], 1)
    number = value[:-1] if value[-1:] in SIZE_SUFFIXES else value
    try:
        return int(float(number) * scale)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 512M, 2G)") from exc


def _add_conversion_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        help="a .npy file, zarr array, precomputed volume, TIFF file or "
        "directory/glob of slices, or file.h5#/dataset",
    )
    p.add_argument("dest", help="output directory or URL (path, file://, memory://, gs://, s3://)")
    p.add_argument("--format", choices=FORMATS, default="precomputed")
    p.add_argument("--layer-type", choices=("image", "segmentation"))
    p.add_argument(
        "--encoding", default="raw", choices=("raw", "jpeg", "png", "compressed_segmentation")
    )
    p.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        help="precomputed data_encoding (none|gzip) or zarr3 inner codec; "
        "default gzip (none for jpeg/png)",
    )
    p.add_argument(
        "--compression-level", type=int, help="gzip 0-9, zstd 1-22, blosc 0-9 (codec default)"
    )
    p.add_argument("--chunk-size", type=_xyz(int), metavar="X,Y,Z", help="default 64,64,64")
    p.add_argument("--resolution", type=_xyz(float), metavar="X,Y,Z", help="nm per voxel")
    p.add_argument("--voxel-offset", type=_xyz(int), metavar="X,Y,Z")
    p.add_argument("--scale-key", help="precomputed scale key (default from the resolution)")
    p.add_argument(
        "--block-size",
        type=_xyz(int),
        metavar="X,Y,Z",
        help="compressed_segmentation block size (default 8,8,8)",
    )
    p.add_argument("--jpeg-quality", type=int, help="1-100 (default 85)")
    p.add_argument("--target-shard-bytes", type=_bytes, default="1G", metavar="SIZE")
    p.add_argument(
        "--memory-budget", type=_bytes, default="1G", metavar="SIZE", help="per shard task"
    )
    p.add_argument(
        "--min-shards",
        type=int,
        default=16,
        help="automatic sharding keeps at least this many shards (parallelism)",
    )
    p.add_argument("--preshift-bits", type=int)
    p.add_argument("--minishard-bits", type=int)
    p.add_argument("--shard-bits", type=int)
    p.add_argument("--hash", choices=("identity", "murmurhash3_x86_128"))
    p.add_argument("--shard-shape", type=_xyz(int), metavar="X,Y,Z", help="zarr3 shard shape")
    p.add_argument(
        "--index-location",
        choices=("end", "start"),
        help="zarr3 shard index position (default end; start suits stores without suffix "
        "range reads)",
    )
    p.add_argument(
        "--mips",
        type=_mips,
        metavar="N|auto",
        help="also build a pyramid of N downsampled levels in the same job, every level "
        "sharded (auto: down to about one chunk); the source is read once",
    )
    p.add_argument(
        "--factor",
        type=_xyz(int),
        metavar="X,Y,Z",
        help="downsampling factor between pyramid levels (default 2,2,2; 2,2,1 for anisotropic EM)",
    )
    p.add_argument(
        "--downsample",
        choices=DOWNSAMPLE_METHODS,
        help="pyramid reduction (default: average for images, mode for segmentations)",
    )
    p.add_argument(
        "--with-meshes",
        action="store_true",
        help="also convert the meshes the segmentation's info names, to sharded meshes",
    )
    p.add_argument(
        "--with-skeletons",
        action="store_true",
        help="also convert the skeletons the segmentation's info names, to sharded skeletons",
    )
    p.add_argument(
        "--legacy-to-multires",
        action="store_true",
        help="re-encode legacy single-resolution meshes (which have no sharded form) as "
        "multi-resolution Draco meshes with one level of detail",
    )
    p.add_argument(
        "--gpu",
        action="store_true",
        help="run shard tasks on GPUs: a dask-cuda cluster here, or the workers of --scheduler "
        "ADDRESS started with --resources GPU=1 (raw and compressed_segmentation)",
    )
    p.add_argument("--source-axes", help="axis order of an array source, e.g. zyx, xyz, czyx")
    p.add_argument("--source-scale", help="scale key of a precomputed source")
    p.add_argument(
        "--storage-options",
        type=json.loads,
        default={},
        metavar="JSON",
        help="fsspec options for the destination (credentials, endpoint_url, ...)",
    )
    p.add_argument(
        "--source-storage-options",
        type=json.loads,
        default={},
        metavar="JSON",
        help="options for a gs:// or s3:// source (e.g. an endpoint_url)",
    )


def _options(args: argparse.Namespace) -> ConvertOptions:
    return ConvertOptions(
        format=args.format,
        layer_type=args.layer_type,
        encoding=args.encoding,
        compression=args.compression,
        compression_level=args.compression_level,
        chunk_size=args.chunk_size,
        resolution=args.resolution,
        voxel_offset=args.voxel_offset,
        scale_key=args.scale_key,
        compressed_segmentation_block_size=args.block_size,
        jpeg_quality=args.jpeg_quality,
        target_shard_bytes=args.target_shard_bytes,
        memory_budget=args.memory_budget,
        min_shards=args.min_shards,
        preshift_bits=args.preshift_bits,
        minishard_bits=args.minishard_bits,
        shard_bits=args.shard_bits,
        hash=args.hash,
        shard_shape=args.shard_shape,
        index_location=args.index_location,
        source_axes=args.source_axes,
        source_scale=args.source_scale,
        storage_options=args.storage_options,
        source_storage_options=args.source_storage_options,
        engine="gpu" if args.gpu else "cpu",
        mips=args.mips,
        factor=args.factor,
        downsample=args.downsample,
        legacy_to_multires=args.legacy_to_multires,
        with_meshes=args.with_meshes,
        with_skeletons=args.with_skeletons,
    )


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
    d.add_argument("--size", type=_xyz(int), default=(512, 512, 128), metavar="X,Y,Z")
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
    """Imports done (distributed too: every scheduler choice loads it), move what they built
    out of the cyclic collector's sight: those objects live until the process exits, and
    walking them again in each full collection during the job and in the final one at exit
    costs about a tenth of a second of a short conversion on two cores."""
    import distributed  # noqa: F401

    gc.freeze()


def _run(args: argparse.Namespace, own_process: bool = False) -> int:
    from shardwright import api

    if args.command == "plan" or (args.command == "convert" and args.dry_run):
        plan = api.plan(args.source, args.dest, _options(args))
        if getattr(args, "json", False):
            print(json.dumps(plan.describe(), indent=2))
        else:
            print(plan.report())
        return 0
    if args.command == "convert":
        if own_process:
            _freeze_startup_objects()
        plan = api.plan(args.source, args.dest, _options(args))
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
    if args.command == "verify":
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


if __name__ == "__main__":
    raise SystemExit(entry())
