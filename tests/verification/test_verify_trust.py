"""verify trusts nothing a destination holds: each corruption is found, every problem is named,
and the command exits 1; a corrupt shard is one problem, not the end of the run."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.lifecycle.lease import heartbeat_key, lease_key

OPTIONS: dict[str, Any] = dict(chunk_size=(8, 8, 8), target_shard_bytes=2048)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[pathlib.Path, str]]:
    """One complete dataset per format, copied by each test before it corrupts it."""
    root = tmp_path_factory.mktemp("verify")
    vol = np.random.default_rng(0).integers(1, 255, (24, 32, 40), dtype=np.uint8)
    np.save(root / "vol.npy", vol)
    out = {}
    for fmt in ("precomputed", "zarr3"):
        dest = root / fmt
        api.convert(str(root / "vol.npy"), str(dest), scheduler="sync", progress=False,
                    format=fmt, **OPTIONS)  # fmt: skip
        out[fmt] = (dest, str(root / "vol.npy"))
    return out


def _copy(datasets: dict[str, Any], fmt: str, tmp_path: pathlib.Path) -> tuple[pathlib.Path, str]:
    dest, source = datasets[fmt]
    copy = tmp_path / fmt
    shutil.copytree(dest, copy)
    return copy, source


def _shards(dest: pathlib.Path) -> list[str]:
    return sorted(s["key"] for s in json.loads((dest / MANIFEST_KEY).read_text())["shards"])


def _flip(dest: pathlib.Path, key: str) -> None:
    data = bytearray((dest / key).read_bytes())
    data[len(data) // 2] ^= 0x01
    (dest / key).write_bytes(bytes(data))


def _truncate(dest: pathlib.Path, key: str) -> None:
    data = (dest / key).read_bytes()
    (dest / key).write_bytes(data[: len(data) - 7])


def _edit_metadata(dest: pathlib.Path, fmt: str) -> str:
    if fmt == "precomputed":
        info = json.loads((dest / "info").read_text())
        info["data_type"] = "uint16"
        info["scales"][0]["size"][0] += 8
        (dest / "info").write_text(json.dumps(info))
        return "info"
    key = "0/zarr.json"  # the level array under the OME-Zarr group at the root
    meta = json.loads((dest / key).read_text())
    meta["shape"][0] += 8
    (dest / key).write_text(json.dumps(meta))
    return key


def _empty_manifest(dest: pathlib.Path) -> None:
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    manifest["shards"] = []
    manifest["totals"]["shards"] = 0
    (dest / MANIFEST_KEY).write_text(json.dumps(manifest))


def _verify_cli(dest: pathlib.Path, source: str | None = None) -> subprocess.CompletedProcess[str]:
    args = ["verify", str(dest), "--full", *(["--against", source] if source else [])]
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True
    )


Corruption = Callable[[pathlib.Path, str], list[str]]


def bit_flip(dest: pathlib.Path, fmt: str) -> list[str]:
    key = _shards(dest)[1]
    _flip(dest, key)
    return [f"{key}: "]  # a crc32c (or index) problem named by key


def truncation(dest: pathlib.Path, fmt: str) -> list[str]:
    key = _shards(dest)[2]
    _truncate(dest, key)
    return [f"{key}: "]


def deleted_shard(dest: pathlib.Path, fmt: str) -> list[str]:
    key = _shards(dest)[0]
    (dest / key).unlink()
    return [f"{key}: missing"]


def extra_shard(dest: pathlib.Path, fmt: str) -> list[str]:
    key = _shards(dest)[0]
    extra = key.rsplit("/", 1)[0] + "/stray.shard"
    shutil.copy(dest / key, dest / extra)
    return [f"{extra}: stored, but not in the manifest"]


def emptied_manifest(dest: pathlib.Path, fmt: str) -> list[str]:
    keys = _shards(dest)
    _empty_manifest(dest)
    return [f"{keys[0]}: stored, but not in the manifest (a shard of the dataset)"]


def emptied_manifest_and_no_shards(dest: pathlib.Path, fmt: str) -> list[str]:
    keys = _shards(dest)
    _empty_manifest(dest)
    for key in keys:
        (dest / key).unlink()
    if fmt == "precomputed":
        return [f"{keys[0]}: missing (the geometry calls for it)"]
    return [f"the manifest accounts for 0 of the {len(keys)} shards"]


def edited_metadata(dest: pathlib.Path, fmt: str) -> list[str]:
    key = _edit_metadata(dest, fmt)
    return [f"{key}: not what the job wrote"]


def two_at_once(dest: pathlib.Path, fmt: str) -> list[str]:
    keys = _shards(dest)
    _flip(dest, keys[1])
    (dest / keys[3]).unlink()
    return [f"{keys[1]}: ", f"{keys[3]}: missing"]


CORRUPTIONS = [bit_flip, truncation, deleted_shard, extra_shard, emptied_manifest,
               emptied_manifest_and_no_shards, edited_metadata, two_at_once]  # fmt: skip


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[c.__name__ for c in CORRUPTIONS])
def test_each_corruption_is_named_and_fails_verify(
    datasets: dict[str, Any], tmp_path: pathlib.Path, fmt: str, corrupt: Corruption
) -> None:
    dest, source = _copy(datasets, fmt, tmp_path)
    assert api.verify(str(dest), source, full=True).ok
    expected = corrupt(dest, fmt)
    for against in (None, source):
        report = api.verify(str(dest), against, full=True)
        assert not report.ok
        for want in expected:
            assert any(p.startswith(want) or want in p for p in report.problems), (
                want,
                report.problems,
            )
    done = _verify_cli(dest, source)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout and not done.stderr


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_a_comparison_goes_on_past_corrupt_shards(
    datasets: dict[str, Any], tmp_path: pathlib.Path, fmt: str
) -> None:
    """Two shards whose chunk data is garbage (indexes intact): every chunk is still compared,
    and each bad chunk is named with its shard."""
    dest, source = _copy(datasets, fmt, tmp_path)
    keys = _shards(dest)
    for key in (keys[0], keys[-1]):
        data = bytearray((dest / key).read_bytes())
        # zarr3 keeps its index at the end, precomputed at the start: spoil the middle.
        start, end = len(data) // 4, 3 * len(data) // 4
        data[start:end] = bytes(range(256)) * ((end - start) // 256) + bytes((end - start) % 256)
        (dest / key).write_bytes(bytes(data))
    total = int(np.prod([3, 4, 5]))  # chunks of 8^3 in 40 x 32 x 24
    report = api.verify(str(dest), source, full=True)
    assert report.chunks_compared == total
    for key in (keys[0], keys[-1]):
        assert any(f"(shard {key})" in p for p in report.problems), report.problems
        assert any(p.startswith(f"{key}: ") for p in report.problems)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('["a list"]', "is not a JSON object"),
        ('{"format": "precomputed", "plan": {}, "totals": {}, "shards": {}}', "'shards'"),
        (
            '{"format": "precomputed", "plan": {}, "totals": {}, "shards": [{"key": '
            '"../../precious.txt", "size": 1, "crc32c": 0, "chunks": 1}]}',
            "is not a key inside the dataset",
        ),
    ],
)
def test_malformed_manifests_get_one_clear_error_and_nothing_is_deleted(
    tmp_path: pathlib.Path, text: str, message: str
) -> None:
    (tmp_path / "precious.txt").write_text("keep")
    dest = tmp_path / "a" / "b"
    dest.mkdir(parents=True)
    (dest / MANIFEST_KEY).write_text(text)
    done = _verify_cli(dest)
    assert done.returncode == 1 and message in done.stdout, done.stdout
    np.save(tmp_path / "vol.npy", np.zeros((8, 8, 8), np.uint8))
    convert = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", str(tmp_path / "vol.npy"),
         str(dest), "--overwrite", "--scheduler", "sync", "--quiet"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert convert.returncode == 2 and message in convert.stderr, convert.stderr
    assert len(convert.stderr.strip().splitlines()) == 1
    assert (tmp_path / "precious.txt").read_text() == "keep"
    assert sorted(p.name for p in dest.iterdir()) == [MANIFEST_KEY]


def test_verify_of_a_missing_or_foreign_destination(tmp_path: pathlib.Path) -> None:
    report = api.verify(str(tmp_path / "nothing-here"))
    assert report.problems == [f"{tmp_path / 'nothing-here'}: not found (no dataset there to "
                               "verify)"]  # fmt: skip
    (tmp_path / "empty").mkdir()
    report = api.verify(str(tmp_path / "empty"))
    assert report.problems == [f"{tmp_path / 'empty'} is an empty folder: nothing to verify"]
    verify = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "verify", str(tmp_path / "nothing-here")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert verify.returncode == 1 and "not found" in verify.stdout
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "a.txt").write_text("x")
    problems = api.verify(str(tmp_path / "foreign")).problems
    assert "no info, zarr.json or Zarr v2 group: not a dataset" in problems[0]


def test_verify_says_when_a_job_is_writing_the_dataset(
    datasets: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    import time

    dest, _ = _copy(datasets, "precomputed", tmp_path)
    now = time.time()
    holder = {"run": "1" * 32, "job": "2" * 32, "host": "node-3", "pid": 7,
              "process_started": 0.0, "started_at": now, "timeout": 120.0, "epoch": 1}  # fmt: skip
    (dest / lease_key(1)).write_text(json.dumps(holder))
    (dest / heartbeat_key(holder["run"])).write_text(json.dumps({"renewed_at": time.time()}))
    report = api.verify(str(dest))
    assert [p.split(":")[0] for p in report.problems] == ["a job is writing this dataset now"]
    assert "on host node-3, pid 7" in report.problems[0]
