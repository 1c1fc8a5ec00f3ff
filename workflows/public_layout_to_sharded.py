"""A public-style Neuroglancer precomputed volume to sharded precomputed.

Public connectomics image layers are laid out as unsharded precomputed: an `info` listing a
pyramid of scales, and under each scale's key one object per chunk, named
`x0-x1_y0-y1_z0-z1`. From a bucket that is millions of small objects; this converts such a
volume to sharded `neuroglancer_uint64_sharded_v1` with `shardwright convert`, and with
`--mips N` builds the sharded pyramid in the same job (the source scale is read once; the
downsampled scales are computed from it, not copied from the source's own coarser scales).

    python workflows/public_layout_to_sharded.py SOURCE DEST [--scale KEY] [--mips N|auto]
        [--factor X,Y,Z] [--scheduler ADDRESS|local|processes|threads|sync]
        [-- more convert options]
    python workflows/public_layout_to_sharded.py --demo DIR [...]

--demo first writes a small public-style layout (two scales, 8 and 16 nm in x and y, 40 nm in
z, unsharded, written by TensorStore) to DIR/public and converts it to DIR/sharded. EM volumes
like this one are anisotropic: --factor defaults to 2,2,1 here, as for the source's own scales.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

import numpy as np
import tensorstore as ts

from shardwright import api
from shardwright.cli import main as shardwright_cli
from shardwright.cli.demo import write_demo_volumes

DEMO_SIZE_XYZ = (256, 256, 32)
DEMO_RESOLUTION = (8.0, 8.0, 40.0)
DEMO_CHUNK_XYZ = (64, 64, 16)


def make_public_layout(root: pathlib.Path, size_xyz: tuple[int, int, int]) -> str:
    """An unsharded two-scale precomputed image at root, as public datasets ship them."""
    url = f"file://{root.absolute()}/"
    with tempfile.TemporaryDirectory() as scratch:
        npy = os.path.join(scratch, "image.npy")
        write_demo_volumes(size_xyz, npy, None)
        image_zyx = np.load(npy)
    base = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": url,
            "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
            "scale_metadata": {
                "size": list(size_xyz),
                "resolution": list(DEMO_RESOLUTION),
                "chunk_size": list(DEMO_CHUNK_XYZ),
                "encoding": "raw",
            },
            "create": True,
        }
    ).result()
    base[...] = image_zyx.T[..., None]
    half = [-(-size_xyz[0] // 2), -(-size_xyz[1] // 2), size_xyz[2]]
    coarse = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": url,
            "scale_metadata": {
                "size": half,
                "resolution": [DEMO_RESOLUTION[0] * 2, DEMO_RESOLUTION[1] * 2, DEMO_RESOLUTION[2]],
                "chunk_size": list(DEMO_CHUNK_XYZ),
                "encoding": "raw",
            },
            "open": True,
            "create": True,
        }
    ).result()
    coarse[...] = ts.downsample(base, [2, 2, 1, 1], "mean")[: half[0], : half[1]].read().result()
    return str(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Public-style precomputed to sharded.")
    parser.add_argument("source", nargs="?", help="precomputed volume (directory, gs://, s3://)")
    parser.add_argument("dest", nargs="?")
    parser.add_argument("--demo", metavar="DIR", help="make a public-style layout and use it")
    parser.add_argument("--scale", help="the scale key to convert (default: the finest)")
    parser.add_argument("--mips", help="downsampled scales to build: a number or auto")
    parser.add_argument(
        "--factor", default="2,2,1", help="downsampling factor x,y,z (default 2,2,1: EM)"
    )
    parser.add_argument("--scheduler", help="as `shardwright convert --scheduler`")
    argv = sys.argv[1:] if argv is None else argv
    # Everything after "--" goes to `shardwright convert` untouched.
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - (1 if "--" in argv else 0)])
    if args.demo:
        root = pathlib.Path(args.demo)
        args.source = args.source or make_public_layout(root / "public", DEMO_SIZE_XYZ)
        args.dest = args.dest or str(root / "sharded")
    if not (args.source and args.dest):
        parser.error("give SOURCE and DEST, or --demo DIR")

    command = ["convert", args.source, args.dest, "--format", "precomputed"]
    if args.scale:
        command += ["--source-scale", args.scale]
    if args.scheduler:
        command += ["--scheduler", args.scheduler]
    if args.mips:
        command += ["--mips", args.mips, "--factor", args.factor]
    command += extra
    print("shardwright " + " ".join(command), file=sys.stderr)
    status = shardwright_cli(command)
    if status:
        return status
    report = api.verify(args.dest, against=args.source, source_scale=args.scale)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
