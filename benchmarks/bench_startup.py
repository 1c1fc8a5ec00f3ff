"""Start-up of the command line: whole-process wall time of the commands that do little.

    python benchmarks/bench_startup.py [--commit BASE | --before /tmp/old/src] [--repeat 21]

Each command runs as a user runs it, `python -m shardwright ARGS` in a fresh process with a
version's `src/` on PYTHONPATH: `--version`, `--help`, `convert --help`, then `status DEST`,
`verify DEST` and `plan SRC DEST` on a 64^3 uint8 .npy converted once (by this tree) into a
temporary folder. Per command: the median and best of N runs (whole process, and until the
first line on stdout), and from one more run through a small wrapper, how many modules the
process imported and whether NumPy, Dask and distributed were among them. `python -c pass`
is measured beside them: the interpreter's own start, the floor.

With `--commit` (or `--before`) the version before a change is measured in the same run, the
two taking turns (ABBA): `git worktree` checks out the commit into a temporary folder, with
this tree's built extensions copied in (their C sources must be unchanged), removed at the
end. Both trees are compiled to bytecode first, as an install does.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import write_result  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "dask", "distributed")
# Runs `python -m shardwright ARGS`, then prints (on stderr, last) what the process imported.
PROBE = (
    "import atexit, json, runpy, sys\n"
    f"heavy = {HEAVY!r}\n"
    "atexit.register(lambda: print(json.dumps({'modules': len(sys.modules),\n"
    "    **{m: m in sys.modules for m in heavy}}), file=sys.stderr))\n"
    "sys.argv = ['shardwright', *sys.argv[1:]]\n"
    "runpy.run_module('shardwright', run_name='__main__', alter_sys=True)\n"
)


def _commands(workdir: pathlib.Path) -> dict[str, list[str]]:
    source, dest = workdir / "volume.npy", workdir / "converted"
    if not source.exists():
        np.save(source, np.random.default_rng(0).integers(0, 255, (64, 64, 64), dtype=np.uint8))
    if not dest.exists():
        subprocess.run(
            [sys.executable, "-m", "shardwright", "convert", str(source), str(dest),
             "--resolution", "8,8,40", "--scheduler", "sync", "--quiet"],
            check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=workdir,
        )  # fmt: skip
    return {
        "--version": ["--version"],
        "--help": ["--help"],
        "convert --help": ["convert", "--help"],
        "status DEST": ["status", str(dest)],
        "verify DEST": ["verify", str(dest)],
        "plan SRC DEST": ["plan", str(source), str(workdir / "planned"), "--resolution", "8,8,40"],
    }


def _checkout(commit: str) -> pathlib.Path:
    """`commit`'s source tree in a temporary worktree, with this tree's built extensions."""
    where = pathlib.Path(tempfile.mkdtemp(prefix="sw-before-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where),
                    commit], check=True)  # fmt: skip
    for built in (ROOT / "src").rglob("*.so"):
        shutil.copy(built, where / built.relative_to(ROOT))
    return where


def _timed(src: str, argv: list[str], workdir: pathlib.Path) -> tuple[float, float]:
    """Seconds until the first line on stdout, and until the process ended."""
    env = {**os.environ, "PYTHONPATH": src}
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    process.stdout.readline()
    first = time.perf_counter() - started
    process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"{argv} exited {process.returncode}")
    return first, time.perf_counter() - started


def _imported(src: str, words: list[str], workdir: pathlib.Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *words], env={**os.environ, "PYTHONPATH": src},
        cwd=workdir, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stderr.splitlines()[-1])
    return found


def _ms(seconds: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "best_ms": round(min(seconds) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="the src/ folder of a version to compare against")
    parser.add_argument("--commit", help="without --before: compare against this commit")
    parser.add_argument("--label", default="startup", help="name of the result file")
    parser.add_argument("--repeat", type=int, default=21, help="runs per version and command")
    parser.add_argument("--quick", action="store_true", help="3 runs each: a smoke run")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="sw-startup-"))
    workdir.mkdir(parents=True, exist_ok=True)
    checkout = _checkout(args.commit) if args.commit and not args.before else None
    before = args.before or (str(checkout / "src") if checkout else None)
    versions = {**({"before": before} if before else {}), "after": str(ROOT / "src")}
    try:
        for src in versions.values():
            compileall.compile_dir(src, quiet=1)
        commands = _commands(workdir)
        load = os.getloadavg()[0]
        floor = [_timed("", [sys.executable, "-c", "pass"], workdir)[1] for _ in range(repeat)]
        figures: dict[str, Any] = {"python -c pass": _ms(floor)}
        for name, words in commands.items():
            argv = [sys.executable, "-m", "shardwright", *words]
            runs: dict[str, list[tuple[float, float]]] = {v: [] for v in versions}
            for i in range(repeat):
                for version in list(versions) if i % 2 == 0 else list(reversed(versions)):
                    runs[version].append(_timed(versions[version], argv, workdir))
            row: dict[str, Any] = {}
            for version, times in runs.items():
                row[version] = {
                    **_ms([total for _, total in times]),
                    "first_line_median_ms": _ms([first for first, _ in times])["median_ms"],
                    **_imported(versions[version], words, workdir),
                }
            if "before" in row:
                row["after_over_before_median"] = round(
                    row["after"]["median_ms"] / row["before"]["median_ms"], 3
                )
            figures[name] = row
            print(name, json.dumps(row), flush=True)
        figures["setup"] = {
            "repeat": repeat,
            "before": args.before or args.commit,
            "loadavg_1min_before": round(load, 2),
            "volume": "64^3 uint8 .npy, converted once with --scheduler sync",
        }
    finally:
        if checkout is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(checkout)], check=False)  # fmt: skip
            shutil.rmtree(checkout.parent, ignore_errors=True)
    path = write_result(args.label, figures, ("shardwright", "numpy", "dask", "distributed"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
