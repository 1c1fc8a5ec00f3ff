"""What `status` and `convert --resume` say about a destination that is not as a job left it,
run as a user runs them (real processes): a plain file, a lease object that is not a lease, a
manifest cut short (and the recovery the message names, followed), and a resume with other
options, each named in words ("format: zarr3 now, precomputed before"), not as JSON."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

MANIFEST = "shardwright-manifest.json"
RUN = ["--scheduler", "sync", "--quiet"]


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardwright.cli", *words],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A small finished conversion (precomputed, chunks of 16)."""
    root = tmp_path_factory.mktemp("wording")
    np.save(root / "src.npy", (np.arange(32**3) % 251).astype(np.uint8).reshape(32, 32, 32))
    options = ["--resolution", "4,4,40", "--chunk-size", "16,16,16"]
    done = _cli("convert", str(root / "src.npy"), str(root / "done"), *options, *RUN)
    assert done.returncode == 0, done.stderr
    return {"root": root, "source": str(root / "src.npy"), "options": options}


def _copy(finished: dict[str, Any], name: str) -> pathlib.Path:
    import shutil

    dest = finished["root"] / name
    shutil.copytree(finished["root"] / "done", dest)
    return dest


def test_status_of_a_plain_file_says_so_in_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("not a dataset")
    run = _cli("status", str(tmp_path / "notes.txt"))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"shardwright status: error: {tmp_path / 'notes.txt'} is a file: status reads the "
        "folder a job writes (its job record under .shardwright/, its manifest)"
    ]


def test_status_reports_a_lease_it_cannot_read(finished: dict[str, Any]) -> None:
    dest = _copy(finished, "garbage-lease")
    (dest / ".shardwright" / "lease-000003.json").write_text("garbage")
    run = _cli("status", str(dest))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"{dest}: finished")
    assert (
        "  lease        .shardwright/lease-000003.json is not a lease shardwright can read: "
        "a job may hold the destination; convert refuses it unless --break-lease"
    ) in lines
    as_json = json.loads(_cli("status", str(dest), "--json").stdout)
    assert as_json["lease_unreadable"].startswith(".shardwright/lease-000003.json is not")
    # and it is so: a convert refuses the destination until the lease is broken
    refused = _cli("convert", finished["source"], str(dest), *finished["options"], "--resume",
                   *RUN)  # fmt: skip
    assert refused.returncode == 2 and "unreadable lease" in refused.stderr


def test_a_manifest_cut_short_names_the_recovery_which_works(finished: dict[str, Any]) -> None:
    dest = _copy(finished, "cut-manifest")
    whole = (dest / MANIFEST).read_text()
    (dest / MANIFEST).write_text(whole[: len(whole) // 2])
    recovery = (f"If shardwright wrote this dataset, delete {MANIFEST} and run the same convert "
                "with --resume: the shards its receipts prove are kept and the manifest is "
                "written again")  # fmt: skip
    status = _cli("status", str(dest))
    assert status.returncode == 2 and len(status.stderr.splitlines()) == 1
    assert f"{MANIFEST} is not valid JSON" in status.stderr and recovery in status.stderr
    resume = _cli("convert", finished["source"], str(dest), *finished["options"], "--resume",
                  *RUN)  # fmt: skip
    assert resume.returncode == 2 and len(resume.stderr.splitlines()) == 1
    assert recovery in resume.stderr
    (dest / MANIFEST).unlink()  # as the message says
    resumed = _cli("convert", finished["source"], str(dest), *finished["options"], "--resume",
                   "--scheduler", "sync")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "(8 kept from an earlier run)" in resumed.stdout
    assert _cli("verify", str(dest), "--against", finished["source"]).returncode == 0
    assert _cli("status", str(dest)).stdout.startswith(f"{dest}: finished")


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        (["--format", "zarr3"], ["format: zarr3 now, precomputed before"]),
        (["--chunk-size", "8,8,8"], ["chunk size: 8,8,8 now, 16,16,16 before"]),
        (["--resolution", "4,4,42"], ["voxel size (nm): 4,4,42 now, 4,4,40 before"]),
        (["--compression", "none"], ["sharding data encoding: raw now, gzip before",
                                     "compression: none now, default before"]),
        (["--mips", "1"], ["pyramid levels: 2 now, 1 before"]),
    ],
)  # fmt: skip
def test_a_resume_with_other_options_names_each_in_words(
    finished: dict[str, Any], changed: list[str], named: list[str]
) -> None:
    options = dict(zip(finished["options"][::2], finished["options"][1::2], strict=True))
    options.update(zip(changed[::2], changed[1::2], strict=True))
    refused = _cli("convert", finished["source"], str(finished["root"] / "done"),
                   *[w for pair in options.items() for w in pair], "--resume", *RUN)  # fmt: skip
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1
    assert "this job differs from the one that wrote it" in refused.stderr
    for words in named:
        assert words in refused.stderr
    assert '{"' not in refused.stderr and '..."' not in refused.stderr  # no JSON, none cut
