"""A killed job resumes writing only what is missing; memory stays near the budget; bad input
is refused with one clear error before anything is written."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.engine import run_shard
from shardwright.errors import PlanError
from shardwright.lifecycle.journal import RECEIPTS
from shardwright.stores import open_store
from tests.support import volumes

SLOW_DRIVER = textwrap.dedent("""
    import sys, time
    import shardwright.engine.engines as engines
    from shardwright import api

    original = engines.run_cpu_shard

    def slow(*args, **kwargs):
        time.sleep(0.15)
        return original(*args, **kwargs)

    engines.run_cpu_shard = slow
    api.convert(sys.argv[1], sys.argv[2], scheduler="sync", progress=False, resume="--resume"
                in sys.argv, chunk_size=(8, 8, 8), target_shard_bytes=1024)
""")


def _shard_files(dest: pathlib.Path) -> dict[str, tuple[int, int]]:
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (dest / "1_1_1").glob("*.shard")
    }


def test_killed_job_resumes_writing_only_missing_shards(tmp_path: pathlib.Path) -> None:
    vol = np.random.default_rng(0).integers(0, 255, (32, 40, 48), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", vol)
    driver = tmp_path / "driver.py"
    driver.write_text(SLOW_DRIVER)
    dest = tmp_path / "out"
    args = [sys.executable, str(driver), str(tmp_path / "vol.npy"), str(dest)]
    proc = subprocess.Popen(args)
    deadline = time.time() + 120
    while len(_shard_files(dest) if dest.exists() else {}) < 5 and time.time() < deadline:
        assert proc.poll() is None, "the conversion ended before it could be killed"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stored = _shard_files(dest)
    assert len(stored) >= 5
    assert not (dest / MANIFEST_KEY).exists()  # the job did not complete
    # A shard killed between its write and its receipt is not proven: resume rewrites it.
    receipts = {p.name.removesuffix(".json") for p in (dest / RECEIPTS).glob("*/1_1_1/*")}
    before = {name: stamp for name, stamp in stored.items() if name in receipts}
    assert len(before) >= 3
    plan = api.plan(
        str(tmp_path / "vol.npy"), str(dest), chunk_size=(8, 8, 8), target_shard_bytes=1024
    )
    expected = {task.key.split("/")[-1] for task in plan.shards()}
    assert len(before) < len(expected)

    with pytest.raises(PlanError, match="not empty"):
        api.convert(plan, scheduler="sync", progress=False)
    subprocess.run([*args, "--resume"], check=True)

    after = _shard_files(dest)
    assert set(after) == expected
    assert all(after[name] == stamp for name, stamp in before.items())  # proven: untouched
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert manifest["totals"]["resumed_shards"] == len(before)
    assert manifest["totals"]["shards"] == len(expected)
    assert not list(dest.rglob(".shardwright-tmp-*"))
    got = (
        ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"})
        .result()
        .read()
        .result()
    )
    np.testing.assert_array_equal(np.asarray(got)[..., 0], vol.T)
    assert api.verify(str(dest), str(tmp_path / "vol.npy"), full=True).ok


def test_resume_rewrites_a_torn_shard(tmp_path: pathlib.Path) -> None:
    vol = np.random.default_rng(1).integers(0, 255, (16, 16, 32), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    options = dict(chunk_size=(8, 8, 8), target_shard_bytes=1024)
    api.convert(str(tmp_path / "vol.npy"), str(dest), scheduler="sync", progress=False, **options)
    victim = sorted((dest / "1_1_1").glob("*.shard"))[1]
    victim.write_bytes(victim.read_bytes()[:100])
    (dest / MANIFEST_KEY).unlink()
    manifest = api.convert(
        str(tmp_path / "vol.npy"),
        str(dest),
        scheduler="sync",
        progress=False,
        resume=True,
        **options,
    )
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.resumed_shards == manifest.totals.shards - 1
    assert api.verify(str(dest), str(tmp_path / "vol.npy"), full=True).ok


def test_shard_task_memory_stays_near_the_budget(tmp_path: pathlib.Path) -> None:
    """One shard of ~96 MiB encoded with a 16 MiB budget: the task spools, peak stays ~budget."""
    budget = 16 * 1024**2
    source = volumes.saved_noise(tmp_path, "noise", (192, 512, 1024), seed=2)
    plan = api.plan(
        source,
        str(tmp_path / "out"),
        chunk_size=(64, 64, 64),
        compression="none",
        memory_budget=budget,
        target_shard_bytes=2 * 1024**3,
        min_shards=1,
    )
    (task,) = list(plan.shards())
    assert plan.estimated_shard_bytes >= 5 * budget
    tracemalloc.start()
    receipt = run_shard(plan, task, open_store(str(tmp_path / "out")), spool_dir=str(tmp_path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert receipt.size >= 5 * budget
    assert peak < 1.25 * budget, f"peak {peak / 2**20:.1f} MiB for a {budget / 2**20} MiB budget"


def _npy(
    tmp_path: pathlib.Path, dtype: str = "uint8", shape: tuple[int, ...] = (20, 30, 40)
) -> str:
    np.save(tmp_path / "vol.npy", np.zeros(shape, dtype=dtype))
    return str(tmp_path / "vol.npy")


BAD_INPUTS = [
    ("missing source", lambda t: (str(t / "nope.npy"), {}), "nope.npy"),
    (
        "unknown source format",
        lambda t: ((t / "notes.txt").write_text("hi") and str(t / "notes.txt"), {}),
        "notes.txt",
    ),
    ("unknown output format", lambda t: (_npy(t), {"format": "n5"}), "output format"),
    ("jpeg on uint64", lambda t: (_npy(t, "uint64"), {"encoding": "jpeg"}), "jpeg"),
    (
        "cseg on float32",
        lambda t: (_npy(t, "float32"), {"encoding": "compressed_segmentation"}),
        "compressed_segmentation",
    ),
    (
        "chunk larger than volume",
        lambda t: (_npy(t), {"chunk_size": (64, 64, 64)}),
        "does not fit the volume",
    ),
    (
        "impossible sharding bits",
        lambda t: (_npy(t), {"preshift_bits": 40, "minishard_bits": 20, "shard_bits": 10}),
        "<= 64",
    ),
    (
        "zarr3 shard not a multiple",
        lambda t: (
            _npy(t),
            {"format": "zarr3", "chunk_size": (8, 8, 8), "shard_shape": (12, 8, 8)},
        ),
        "multiple of the chunk size",
    ),
    ("zstd for precomputed", lambda t: (_npy(t), {"compression": "zstd"}), "none or gzip"),
    (
        "key escaping the root",
        lambda t: (_npy(t), {"scale_key": "../../elsewhere"}),
        "directly below the dataset root",
    ),
    ("nested scale key", lambda t: (_npy(t), {"scale_key": "a/b"}), "no path separators"),
    ("scale key info", lambda t: (_npy(t), {"scale_key": "info"}), "dataset's own objects"),
    (
        "scale key of the manifest",
        lambda t: (_npy(t), {"scale_key": "shardwright-manifest.json"}),
        "dataset's own objects",
    ),
    ("hidden scale key", lambda t: (_npy(t), {"scale_key": ".shardwright"}), "starting with '.'"),
    ("nan resolution", lambda t: (_npy(t), {"resolution": (float("nan"), 1, 1)}), "finite"),
    ("infinite resolution", lambda t: (_npy(t), {"resolution": (1, float("inf"), 1)}), "finite"),
    ("zero resolution", lambda t: (_npy(t), {"resolution": (1, 0, 1)}), "positive"),
    (
        "offset beyond int64",
        lambda t: (_npy(t), {"voxel_offset": (2**63 - 1, 0, 0)}),
        "signed 64-bit",
    ),
    (
        "offset below int64",
        lambda t: (_npy(t), {"voxel_offset": (0, -(2**63) - 1, 0)}),
        "signed 64-bit",
    ),
    ("zero-length axis", lambda t: (_npy(t, shape=(0, 4, 4)), {}), "zero-length axis"),
    (
        "float segmentation",
        lambda t: (_npy(t, "float32"), {"layer_type": "segmentation"}),
        "cannot be a segmentation",
    ),
    (
        "float64 zarr3 segmentation",
        lambda t: (_npy(t, "float64"), {"format": "zarr3", "layer_type": "segmentation"}),
        "cannot be a segmentation",
    ),
    (
        "jpeg quality with zarr3",
        lambda t: (_npy(t), {"format": "zarr3", "jpeg_quality": 90}),
        "jpeg_quality applies to precomputed",
    ),
    (
        "sharding bits with zarr3",
        lambda t: (_npy(t), {"format": "zarr3", "minishard_bits": 2}),
        "minishard_bits applies to precomputed",
    ),
    (
        "shard shape with precomputed",
        lambda t: (_npy(t), {"shard_shape": (16, 16, 16)}),
        "shard_shape applies to zarr3",
    ),
    (
        "index location with precomputed",
        lambda t: (_npy(t), {"index_location": "start"}),
        "index_location applies to zarr3",
    ),
    (
        "jpeg quality without jpeg",
        lambda t: (_npy(t), {"jpeg_quality": 90}),
        "jpeg_quality applies to encoding='jpeg'",
    ),
    (
        "block size without compressed_segmentation",
        lambda t: (_npy(t), {"compressed_segmentation_block_size": (4, 4, 4)}),
        "compressed_segmentation_block_size applies",
    ),
    (
        "compression level without compression",
        lambda t: (_npy(t), {"compression": "none", "compression_level": 3}),
        "not compression='none'",
    ),
    (
        "compression level of jpeg chunks",
        lambda t: (_npy(t), {"encoding": "jpeg", "compression_level": 3}),
        "use jpeg_quality",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, case: tuple
) -> None:
    _, make, message = case
    source, options = make(tmp_path)
    dest = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        api.convert(source, str(dest), scheduler="sync", progress=False, **options)
    assert not dest.exists()


@pytest.mark.parametrize("flags", [{}, {"resume": True}, {"overwrite": True}])
def test_a_destination_holding_other_files_is_refused(
    tmp_path: pathlib.Path, flags: dict[str, bool]
) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me")
    with pytest.raises(PlanError, match=r"did not write \(e.g. precious.txt\)"):
        api.convert(_npy(tmp_path), str(dest), scheduler="sync", progress=False, **flags)
    assert [p.name for p in dest.iterdir()] == ["precious.txt"]
    assert (dest / "precious.txt").read_text() == "keep me"


def test_resume_into_a_different_plan_is_refused(tmp_path: pathlib.Path) -> None:
    source = _npy(tmp_path)
    dest = str(tmp_path / "out")
    api.convert(source, dest, scheduler="sync", progress=False, chunk_size=(8, 8, 8))
    with pytest.raises(PlanError, match=r"wrote it.*chunk size: 16,16,16 now, 8,8,8 before"):
        api.convert(
            source, dest, scheduler="sync", progress=False, chunk_size=(16, 16, 16), resume=True
        )


def test_cli_reports_bad_input_as_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardwright.cli import main

    assert main(["convert", str(tmp_path / "missing.npy"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.npy" in err[0]


def test_memory_destination_with_worker_processes_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PlanError, match="lives in this process"):
        api.convert(
            _npy(tmp_path), "memory://sw-refused/out", scheduler="processes", progress=False
        )


class _SyntheticSource:
    """A huge volume that exists only as a formula: for planning at scale without data."""

    url = "synthetic://ramp"
    axes = "zyx"
    num_channels = 1
    dtype = np.dtype("uint8")

    def __init__(self, shape_xyz: tuple[int, int, int]):
        from shardwright.sources import SourceHints

        self.shape_xyz = shape_xyz
        self.hints = SourceHints()

    def read(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        return np.full((*shape, 1), (start[0] + start[1]) % 251, dtype=np.uint8)

    def read_native(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        return self.read(start, stop)[..., 0].T


def test_a_million_shard_plan_stays_small_and_lazy(tmp_path: pathlib.Path) -> None:
    source = _SyntheticSource((800, 800, 800))  # 100^3 chunks of 8^3, one chunk per shard
    tracemalloc.start()
    plan = api.plan(
        source,
        str(tmp_path / "out"),
        chunk_size=(8, 8, 8),
        compression="none",
        target_shard_bytes=512,
    )
    report = plan.report()
    shards = plan.shards()
    first = [next(shards) for _ in range(3)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert plan.shard_count == 10**6 and "1,000,000 shards" in report
    assert peak < 8 * 1024**2, f"planning a million shards took {peak / 2**20:.1f} MiB"
    assert [t.chunk_start for t in first] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert len({t.key for t in first}) == 3
