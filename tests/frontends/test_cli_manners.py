"""What a user meets around a conversion, through the console script: quiet means quiet,
refusals come before any plan, verify says what it compared, the package lists its API."""

from __future__ import annotations

import pathlib
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import shardwright
from shardwright.errors import NAMED, Alias, PlanError
from shardwright.lifecycle.run_options import flag_wording


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *words], capture_output=True, text=True
    )


def _volume(tmp_path: pathlib.Path, dtype: str = "uint8") -> str:
    rng = np.random.default_rng(3)
    path = tmp_path / "volume.npy"
    np.save(path, rng.integers(0, 200, (48, 64, 64)).astype(dtype))
    return str(path)


def test_quiet_prints_only_the_result_even_when_the_dashboard_port_is_taken(
    tmp_path: pathlib.Path,
) -> None:
    """Dask's default dashboard port busy (another notebook's cluster): --quiet still prints
    no Dask warning, no plan, no progress: one line on stdout, nothing on stderr (the voxel
    size given, so that ours has nothing to say either)."""
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", 8787))
        except OSError:
            pass  # already taken by something else: the case this test is about
        else:
            busy.listen()
        run = _cli("convert", _volume(tmp_path), str(tmp_path / "out"), "--quiet",
                   "--resolution", "8,8,40")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert run.stdout.count("\n") == 1 and run.stdout.startswith("wrote ")


def test_counts_are_worded_as_counts(tmp_path: pathlib.Path) -> None:
    """One of a thing is singular, thousands are grouped: `wrote 1 shard, 1 chunk, 1,234
    bytes`, and the plan says `1 shard of 1 x 1 x 1 chunks (1 chunk)`."""
    np.save(tmp_path / "one.npy", np.arange(16 * 16 * 16, dtype=np.uint16).reshape(16, 16, 16))
    run = _cli("convert", str(tmp_path / "one.npy"), str(tmp_path / "out"), "--resolution",
               "8,8,40", "--scheduler", "sync")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert re.match(r"wrote 1 shard, 1 chunk, \d{1,3}(,\d{3})+ bytes to ", run.stdout), run.stdout
    assert "(0 kept from an earlier run)" in run.stdout
    assert "shards       1 shard of 1 x 1 x 1 chunks (1 chunk)" in run.stderr
    assert "grid 1 x 1 x 1 = 1 chunk;" in run.stderr


def test_a_refused_job_prints_one_error_and_no_plan(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    run = _cli("convert", _volume(tmp_path), str(dest))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"shardwright convert: error: destination {dest} holds files shardwright did not "
        "write (e.g. notes.txt); choose a new or empty destination. --overwrite replaces only "
        "shardwright datasets"
    ]
    assert (dest / "notes.txt").read_text() == "mine" and len(list(dest.iterdir())) == 1


def test_verify_of_jpeg_output_names_the_tolerance_it_compared_within(
    tmp_path: pathlib.Path,
) -> None:
    source = _volume(tmp_path)
    dest = str(tmp_path / "jpeg")
    assert _cli("convert", source, dest, "--encoding", "jpeg", "--quiet").returncode == 0
    run = _cli("verify", dest, "--against", source, "--full")
    assert run.returncode == 0, run.stdout
    assert "OK" in run.stdout.splitlines()[0]
    assert "note: jpeg chunks compared within a mean absolute error of" in run.stdout


def test_the_package_lists_its_api() -> None:
    names = dir(shardwright)
    for name in ("plan", "convert", "verify", "open_source", "ConvertOptions", "errors"):
        assert name in names and name in shardwright.__all__
    assert callable(shardwright.convert) and callable(shardwright.plan)


def test_errors_name_api_parameters_in_python_and_flags_on_the_command_line(
    tmp_path: pathlib.Path,
) -> None:
    source = _volume(tmp_path)
    with pytest.raises(PlanError) as caught:
        shardwright.plan(source, str(tmp_path / "a"), compression="none", compression_level=5)
    assert str(caught.value) == (
        "compression_level applies to gzip, zstd or blosc, not compression='none'"
    )
    run = _cli("plan", source, str(tmp_path / "a"), "--compression", "none",
               "--compression-level", "5")  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "shardwright plan: error: --compression-level applies to gzip, zstd or blosc, not "
        "--compression none"
    )


def test_an_error_names_options_as_data_each_front_end_words_them() -> None:
    """Options are named by field in the message and given beside it: `str()` words them as
    the API's parameters, the command line as its flags (switches bare, another program's
    flags untouched), and the error crosses a pickle (a worker's) intact."""
    import pickle

    error = PlanError(
        "run again with {resume}, or start `dask-cuda-worker --resources GPU=1` ({engine}); "
        "{mips} is too many, use {most}; keep {chunk_size}; see {timeout}",
        resume=True,
        engine="gpu",
        mips=9,
        most=Alias("mips", 3),
        chunk_size=(64, 64, 32),
        timeout=NAMED,
    )
    assert str(error) == (
        "run again with resume=True, or start `dask-cuda-worker --resources GPU=1` "
        "(engine='gpu'); mips=9 is too many, use mips=3; keep chunk_size=(64, 64, 32); see timeout"
    )
    assert error.render(flag_wording) == (
        "run again with --resume, or start `dask-cuda-worker --resources GPU=1` (--gpu); "
        "--mips 9 is too many, use --mips 3; keep --chunk-size 64,64,32; see --timeout"
    )
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is PlanError and str(again) == str(error)
    assert again.render(flag_wording) == error.render(flag_wording)


ORPHAN = """
import asyncio, gc, sys
from shardwright.jobs import logs
logs.configure(verbose=sys.argv[1] == "verbose")
async def main():
    future = asyncio.get_running_loop().create_future()
    future.set_exception(TimeoutError("Timeout"))  # dropped, as a library's timeout may be
asyncio.run(main())
gc.collect()
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_asyncio_complaints_show_only_with_verbose(verbose: bool) -> None:
    """A future a library drops with its exception unread makes asyncio log "Future exception
    was never retrieved" (seen once on a loaded CI machine under --quiet): nothing a user can
    act on, so shown with --verbose only."""
    run = subprocess.run([sys.executable, "-c", ORPHAN, "verbose" if verbose else "quiet"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert ("Future exception was never retrieved" in run.stderr) == verbose, run.stderr
