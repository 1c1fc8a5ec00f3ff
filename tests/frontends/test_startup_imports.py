"""What a command imports before it prints: `--version` and every `--help` nothing of NumPy,
Dask or distributed (they load in a fraction of the time), `status` and `verify` of a local
dataset no Dask and no distributed (no cluster runs for them). Checked on `sys.modules` in a
fresh process running the console script's code, not on the clock."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import pytest

import shardwright
from shardwright.cli.parser import build_parser

HEAVY = ("numpy", "dask", "distributed")
# Runs `python -m shardwright ARGS`, then says (on stderr, last) which HEAVY modules it loaded.
PROBE = (
    "import atexit, json, runpy, sys\n"
    f"heavy = {HEAVY!r}\n"
    "atexit.register(lambda: print(json.dumps([m for m in heavy if m in sys.modules]),\n"
    "                              file=sys.stderr))\n"
    "sys.argv = ['shardwright', *sys.argv[1:]]\n"
    "runpy.run_module('shardwright', run_name='__main__', alter_sys=True)\n"
)


def _imported(*words: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *words], capture_output=True, text=True, timeout=120
    )
    return run, json.loads(run.stderr.splitlines()[-1])


def _commands() -> list[str]:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(commands.choices)


@pytest.mark.parametrize(
    "words", [["--version"], ["--help"], *[[c, "--help"] for c in _commands()]], ids=" ".join
)
def test_version_and_help_import_no_numpy_dask_or_distributed(words: list[str]) -> None:
    run, imported = _imported(*words)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert imported == []


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("startup")
    np.save(root / "volume.npy", np.arange(32**3, dtype=np.uint16).reshape(32, 32, 32))
    dest = str(root / "out")
    shardwright.convert(str(root / "volume.npy"), dest, resolution=(8, 8, 40), scheduler="sync",
                        progress=False)  # fmt: skip
    return dest


@pytest.mark.parametrize("command", ["status", "verify"])
def test_status_and_verify_of_a_local_dataset_start_no_cluster_machinery(
    command: str, dataset: str
) -> None:
    """They read a few files: NumPy, yes (the probe sees what loads), Dask and distributed
    no."""
    run, imported = _imported(command, dataset)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert imported == ["numpy"]


def test_a_small_conversion_runs_on_threads_of_its_process_and_says_why(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A job reading under SMALL_JOB_BYTES, with no scheduler named, starts no cluster:
    distributed is never imported, and its last line says where it ran and why."""
    root = tmp_path_factory.mktemp("small")
    np.save(root / "volume.npy", np.arange(32**3, dtype=np.uint16).reshape(32, 32, 32))
    run, imported = _imported("convert", str(root / "volume.npy"), str(root / "out"), "--quiet")
    assert run.returncode == 0, run.stderr
    assert "distributed" not in imported
    assert "(no Dask cluster: a job this small needs none)" in run.stdout
    run, imported = _imported("convert", str(root / "volume.npy"), str(root / "asked"),
                              "--quiet", "--scheduler", "local")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "distributed" in imported and "no Dask cluster" not in run.stdout
