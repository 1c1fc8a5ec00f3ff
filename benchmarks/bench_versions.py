"""Whole-process conversion time of two versions of shardwright, on the same volumes, in turns.

    python benchmarks/bench_versions.py --before /tmp/old/src --label before-lifecycle

A change that may cost time is measured against the code before it in the same run: each
version's `src/` is put first on PYTHONPATH of a fresh `python -m shardwright.cli convert`
(the C extensions must be built in both trees), the versions take turns (ABBA), and the best
and median of N runs are compared. Without `--before`, `git worktree` checks out `--commit`
into a temporary folder and copies this tree's built extensions there (their C sources must
be unchanged). Cases: the conversions of bench_convert.py, plus a job of 512 one-chunk shards
that shows what a change costs per shard.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import write_result  # noqa: E402

from shardwright.cli.demo import write_demo_volumes  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMON = ["--chunk-size", "64,64,64", "--resolution", "8,8,40", "--quiet"]


def _cases(workdir: pathlib.Path) -> dict[str, tuple[str, list[str]]]:
    image, labels = workdir / "image.npy", workdir / "labels.npy"
    if not image.exists():
        write_demo_volumes((1024, 1024, 512), str(image), None)
    if not labels.exists():
        write_demo_volumes((512, 512, 256), None, str(labels))
    small = workdir / "small.npy"
    if not small.exists():
        rng = np.random.default_rng(0)
        np.save(small, rng.integers(0, 255, (128, 128, 128), dtype=np.uint8))
    return {
        "precomputed_raw": (str(image), [*COMMON, "--compression", "none"]),
        "precomputed_gzip": (str(image), [*COMMON, "--compression", "gzip"]),
        "precomputed_cseg": (
            str(labels),
            [*COMMON, "--encoding", "compressed_segmentation", "--layer-type", "segmentation"],
        ),
        "zarr3_gzip": (str(image), [*COMMON, "--format", "zarr3", "--compression", "gzip"]),
        "512_small_shards": (
            str(small),
            [
                "--chunk-size",
                "16,16,16",
                "--target-shard-bytes",
                "4096",
                "--min-shards",
                "1",
                "--quiet",
            ],
        ),  # fmt: skip
    }


def _checkout(commit: str) -> pathlib.Path:
    """`commit`'s source tree in a temporary worktree, with this tree's built extensions."""
    where = pathlib.Path(tempfile.mkdtemp(prefix="sw-before-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where),
                    commit], check=True)  # fmt: skip
    for built in (ROOT / "src").rglob("*.so"):
        shutil.copy(built, where / built.relative_to(ROOT))
    return where / "src"


def _run(src: str, source: str, dest: pathlib.Path, options: list[str]) -> float:
    shutil.rmtree(dest, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": src}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", source, str(dest), *options],
        check=True, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="the src/ folder of the version to compare against")
    parser.add_argument("--commit", default="HEAD~1", help="without --before: this commit")
    parser.add_argument("--label", default="versions", help="name of the result file")
    parser.add_argument("--repeat", type=int, default=9, help="runs per version and case")
    parser.add_argument("--cases", help="comma-separated subset of the cases")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="sw-versions-"))
    workdir.mkdir(parents=True, exist_ok=True)
    versions = {"before": args.before or str(_checkout(args.commit)), "after": str(ROOT / "src")}
    cases = _cases(workdir)
    if args.cases:
        cases = {name: cases[name] for name in args.cases.split(",")}
    figures: dict[str, Any] = {}
    for name, (source, options) in cases.items():
        times: dict[str, list[float]] = {v: [] for v in versions}
        for i in range(args.repeat):
            order = list(versions) if i % 2 == 0 else list(reversed(versions))
            for version in order:
                dest = workdir / f"out-{version}"
                times[version].append(_run(versions[version], source, dest, options))
        row: dict[str, Any] = {}
        for version, runs in times.items():
            row[f"{version}_best_s"] = round(min(runs), 3)
            row[f"{version}_median_s"] = round(float(np.median(runs)), 3)
        row["after_over_before_best"] = round(min(times["after"]) / min(times["before"]), 3)
        row["after_over_before_median"] = round(
            float(np.median(times["after"]) / np.median(times["before"])), 3
        )
        figures[name] = row
        print(name, row, flush=True)
    figures["setup"] = {"repeat": args.repeat, "before": args.before or args.commit}
    path = write_result(args.label, figures, ("shardwright", "dask", "distributed", "isal"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
