"""Whole-process conversion time: shardwright vs TensorStore (and zarr-python for zarr3),
on the same volume, with the same chunking and sharding, in the same run.

Cases (issue targets on the 2-core machine in brackets, as TensorStore time / ours):
  precomputed raw, 512 MiB uint8 EM-like image              [>= 3x]
  precomputed raw + gzip, same image                        [>= 3x]
  precomputed compressed_segmentation + gzip, uint64 labels [>= 1.5x]
  zarr3 gzip, same image, also vs zarr-python               [>= 3x]

Each tool runs in its own fresh Python process (start-up, imports and, for us, the local
Dask cluster included) and must read the .npy source and write the sharded dataset to local
disk. Every output is read back and compared with the source before its time counts.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import write_result  # noqa: E402

from shardwright import api  # noqa: E402
from shardwright.demo import write_demo_volumes  # noqa: E402

TENSORSTORE_PRECOMPUTED = """
import json, sys, numpy as np, tensorstore as ts
src, dest, info = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = np.load(src, mmap_mode="r")
scale = info["scales"][0]
store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/",
                 "multiscale_metadata": {k: info[k] for k in ("type", "data_type",
                                                              "num_channels")},
                 "scale_metadata": {k: scale[k] for k in scale if k != "chunk_sizes"}
                 | {"chunk_size": scale["chunk_sizes"][0]},
                 "create": True}).result()
store[...].write(data.T[..., None]).result()
"""

TENSORSTORE_ZARR3 = """
import json, sys, numpy as np, tensorstore as ts
src, dest, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = np.load(src, mmap_mode="r")
store = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/", "metadata": meta,
                 "create": True}).result()
store.write(data).result()
"""

ZARR_PYTHON = """
import json, sys, numpy as np, zarr
from zarr.codecs import GzipCodec
src, dest, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = np.load(src, mmap_mode="r")
sharding = meta["codecs"][0]["configuration"]
level = sharding["codecs"][1]["configuration"]["level"]
arr = zarr.create_array(dest, shape=data.shape, dtype=data.dtype,
                        shards=meta["chunk_grid"]["configuration"]["chunk_shape"],
                        chunks=sharding["chunk_shape"], compressors=GzipCodec(level=level),
                        dimension_names=meta.get("dimension_names"), fill_value=0)
arr[...] = data
"""


def _timed(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _check(dest: str, driver: str, want_xyz_or_zyx: np.ndarray, lossy: bool = False) -> None:
    got = ts.open({"driver": driver, "kvstore": f"file://{dest}/"}).result().read().result()
    got = np.asarray(got)
    if driver == "neuroglancer_precomputed":
        got = got[..., 0].T
    if not np.array_equal(got, want_xyz_or_zyx):
        raise AssertionError(f"{dest}: output differs from the source")


def run_case(
    name: str,
    source: str,
    workdir: pathlib.Path,
    options: dict[str, Any],
    peers: list[str],
    scheduler: str | None,
    workers: int | None,
    repeat: int,
) -> dict[str, Any]:
    """Best of `repeat` runs of each tool, the tools taking turns; outputs checked each time."""
    data = np.load(source, mmap_mode="r")
    ours_dest = str(workdir / f"{name}-ours")
    plan = api.plan(source, ours_dest, **options)
    driver = "neuroglancer_precomputed" if plan.info is not None else "zarr3"
    cmd = [
        sys.executable,
        "-m",
        "shardwright.cli",
        "convert",
        source,
        ours_dest,
        "--quiet",
        *_cli_options(options),
    ]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    if workers:
        cmd += ["--workers", str(workers)]
    runs: dict[str, list[str]] = {"ours": cmd}
    _, metadata = plan.metadata_document()
    for peer in peers:
        if peer == "tensorstore":
            script = TENSORSTORE_PRECOMPUTED if plan.info is not None else TENSORSTORE_ZARR3
        else:
            script = ZARR_PYTHON
        dest = str(workdir / f"{name}-{peer}")
        runs[peer] = [sys.executable, "-c", script, source, dest, json.dumps(metadata)]
    figures: dict[str, Any] = {"source_bytes": int(data.nbytes), "plan": plan.describe()}
    best = {tool: float("inf") for tool in runs}
    for _ in range(repeat):
        for tool, args in runs.items():
            dest = ours_dest if tool == "ours" else args[-2]
            shutil.rmtree(dest, ignore_errors=True)
            best[tool] = min(best[tool], _timed(args))
            _check(dest, driver, data)
            figures[f"{tool}_output_bytes"] = _dir_bytes(dest)
            shutil.rmtree(dest)
    for tool, seconds in best.items():
        figures[f"{tool}_s"] = seconds
        if tool != "ours":
            figures[f"ratio_{tool}_over_ours"] = seconds / best["ours"]
    return figures


def floors(source: str, workdir: pathlib.Path, repeat: int) -> dict[str, Any]:
    """What no tool can beat on this machine, to read the ratios against: starting Python
    with our imports and a local Dask cluster's, starting Python with TensorStore's, and
    copying the source's bytes once (read + write through the page cache, no reordering)."""
    ours = [sys.executable, "-c", "import shardwright.cli, distributed"]
    theirs = [sys.executable, "-c", "import numpy, tensorstore"]
    copy = workdir / "copy-floor.bin"

    def copy_once() -> float:
        started = time.perf_counter()
        shutil.copyfile(source, copy)
        seconds = time.perf_counter() - started
        copy.unlink()
        return seconds

    return {
        "ours_start_and_imports_s": min(_timed(ours) for _ in range(repeat)),
        "tensorstore_start_and_imports_s": min(_timed(theirs) for _ in range(repeat)),
        "copy_source_once_s": min(copy_once() for _ in range(repeat)),
    }


def _cli_options(options: dict[str, Any]) -> list[str]:
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, tuple):
            value = ",".join(str(v) for v in value)
        out += [flag, str(value)]
    return out


def _dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="64 MiB volumes, for a smoke run")
    parser.add_argument(
        "--scheduler", help="passed to shardwright convert (default: local distributed cluster)"
    )
    parser.add_argument("--workers", type=int)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per tool")
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        help="volumes N times deeper (z), to see how the ratios move as start-up weighs less",
    )
    parser.add_argument("--cases", help="comma-separated subset of the cases to run")
    args = parser.parse_args()
    image_size = (512, 512, 256) if args.quick else (1024, 1024, 512 * args.scale)
    label_size = (256, 256, 128) if args.quick else (512, 512, 256 * args.scale)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="sw-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    image = str(workdir / "image-{}x{}x{}.npy".format(*image_size))
    labels = str(workdir / "labels-{}x{}x{}.npy".format(*label_size))
    if not os.path.exists(image):
        write_demo_volumes(image_size, image, None)
    if not os.path.exists(labels):
        write_demo_volumes(label_size, None, labels)
    common = {"chunk_size": (64, 64, 64), "resolution": (8, 8, 40)}
    cases = {
        "precomputed_raw": (image, {**common, "compression": "none"}, ["tensorstore"]),
        "precomputed_gzip": (image, {**common, "compression": "gzip"}, ["tensorstore"]),
        "precomputed_cseg": (
            labels,
            {**common, "encoding": "compressed_segmentation", "layer_type": "segmentation"},
            ["tensorstore"],
        ),
        "zarr3_gzip": (
            image,
            {**common, "format": "zarr3", "compression": "gzip"},
            ["tensorstore", "zarr_python"],
        ),
    }
    if args.cases:
        cases = {name: cases[name] for name in args.cases.split(",")}
    figures = {}
    for name, (source, options, peers) in cases.items():
        figures[name] = run_case(
            name, source, workdir, options, peers, args.scheduler, args.workers, args.repeat
        )
        ratios = {k: round(v, 2) for k, v in figures[name].items() if k.startswith("ratio")}
        print(f"{name}: ours {figures[name]['ours_s']:.2f} s  {ratios}", flush=True)
    figures["floors"] = floor = floors(image, workdir, args.repeat)
    # The best ratio any converter started like ours could reach on the raw image: TensorStore's
    # time over our start-up plus one plain copy of the bytes.
    if "precomputed_raw" in figures:
        floor["max_ratio_tensorstore_over_ours_raw"] = figures["precomputed_raw"][
            "tensorstore_s"
        ] / (floor["ours_start_and_imports_s"] + floor["copy_source_once_s"])
    print(f"floors: {json.dumps({k: round(v, 3) for k, v in floor.items()})}")
    figures["setup"] = {
        "repeat": args.repeat,
        "image_xyz": image_size,
        "labels_xyz": label_size,
        "scheduler": args.scheduler or "local",
        "workers": args.workers,
        "cpus": os.cpu_count(),
    }
    name = "convert-quick" if args.quick else "convert"
    if args.scale > 1:
        name += f"-x{args.scale}"
    path = write_result(
        name,
        figures,
        ("shardwright", "tensorstore", "zarr", "dask", "distributed", "isal"),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
