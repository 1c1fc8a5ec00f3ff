"""Multiscale pyramids built in the conversion job: the reductions against a straightforward
per-block NumPy reference, the level geometry and its refusals, end-to-end conversions on a
real 2-process LocalCluster read back level by level by TensorStore and CloudVolume
(precomputed) or TensorStore and zarr-python (zarr3), a count of source reads, the memory of
a 4-level pyramid's tasks, resume, and the plan report."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr
from hypothesis import given
from hypothesis import strategies as st

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.common import downsample
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.engine.pyramid import run_pyramid_shard
from shardwright.errors import PlanError
from shardwright.sources import NpySource, SourceHints
from shardwright.stores import open_store
from tests.support import volumes
from tests.support.downsampling_reference import reference

SIZE_XYZ = (45, 38, 21)  # odd in every axis, and not a multiple of any chunk size below
SMALL = dict(chunk_size=(16, 16, 8), target_shard_bytes=16 * 1024, memory_budget=64 * 1024**2)


def reference_pyramid(
    vol: np.ndarray, steps: Sequence[tuple[int, int, int]], method: str
) -> list[np.ndarray]:
    """The base and a level per step, each the reference reduction of the one below."""
    out = [vol]
    for step in steps:
        out.append(reference(out[-1], step, method))
    return out


# -- geometry and refusals ------------------------------------------------------------------------
class _Synthetic:
    """A volume that exists only as a formula: for planning without data."""

    url = "synthetic://ramp"
    axes = "zyx"
    num_channels = 1
    dtype = np.dtype("uint8")

    def __init__(self, shape_xyz: tuple[int, int, int], layer_type: str | None = None):
        self.shape_xyz = shape_xyz
        self.hints = SourceHints(layer_type=layer_type)

    def read(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        return np.full((*shape, 1), (start[0] + start[1]) % 251, dtype=np.uint8)

    def read_native(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        return self.read(start, stop)[..., 0].T


def test_levels_in_info_follow_the_conventions(tmp_path: pathlib.Path) -> None:
    plan = api.plan(
        _Synthetic((1000, 700, 101)),
        str(tmp_path / "out"),
        mips=3,
        factor=(2, 2, 1),
        resolution=(8, 8, 40),
        voxel_offset=(11, -3, 7),
    )
    scales = plan.metadata_document()[1]["scales"]
    assert [s["key"] for s in scales] == ["8_8_40", "16_16_40", "32_32_40", "64_64_40"]
    assert [s["size"] for s in scales] == [
        [1000, 700, 101],
        [500, 350, 101],
        [250, 175, 101],
        [125, 88, 101],
    ]
    assert [s["voxel_offset"] for s in scales] == [[11, -3, 7], [5, -2, 7], [2, -1, 7], [1, -1, 7]]
    assert all(s["sharding"]["hash"] == "identity" for s in scales)
    assert scales[-1]["chunk_sizes"] == [[64, 64, 64]]
    assert plan.describe()["pyramid"] == {
        "levels": 4,
        "factors_xyz": [[2, 2, 1]] * 3,
        "factor_from": "as given",
        "method": "average",
        "rules": downsample.RULES,
    }


def test_mips_auto_stops_at_about_one_chunk(tmp_path: pathlib.Path) -> None:
    plan = api.plan(_Synthetic((1024, 1024, 512)), str(tmp_path / "o"), mips="auto")
    assert [list(p["size_xyz"]) for p in plan.describe()["levels"]][-1] == [64, 64, 32]
    seg = api.plan(
        _Synthetic((1000, 300, 40), "segmentation"), str(tmp_path / "s"), mips="auto",
        factor=(2, 2, 1),
    )  # fmt: skip
    assert seg.pyramid is not None and seg.pyramid.method == "mode"
    assert [p["size_xyz"] for p in seg.describe()["levels"]][-1] == [63, 19, 40]


@given(
    size=st.tuples(st.integers(8, 300), st.integers(8, 300), st.integers(4, 90)),
    chunk=st.tuples(st.integers(3, 40), st.integers(3, 40), st.integers(2, 20)),
    factor=st.sampled_from([(2, 2, 2), (2, 2, 1), (3, 3, 1)]),
    fmt=st.sampled_from(["precomputed", "zarr3"]),
)
def test_every_level_tiles_exactly(
    tmp_path_factory: pytest.TempPathFactory,
    size: tuple[int, int, int],
    chunk: tuple[int, int, int],
    factor: tuple[int, int, int],
    fmt: str,
) -> None:
    """Shard boxes sit on whole downsampling blocks, and the pieces each task hands up tile
    the tasks of the next level exactly (odd chunk sizes included)."""
    chunk = tuple(min(c, s) for c, s in zip(chunk, size, strict=True))  # type: ignore[assignment]
    try:
        plan = api.plan(
            _Synthetic(size), "memory://unused", mips="auto", factor=factor, chunk_size=chunk,
            target_shard_bytes=4096, memory_budget=16 * 1024**2, format=fmt,
        )  # fmt: skip
    except PlanError as exc:
        assert "memory budget" in str(exc)  # odd chunks may need shards too big to hold
        return
    for k in range(plan.level_count):
        level = plan.level_plan(k)
        covered = 0
        for task in level.shards():
            box = level.voxel_box(task)
            if k + 1 < plan.level_count:  # interior boundaries on the factor grid
                for d in range(3):
                    assert box[0][d] % factor[d] == 0
                    assert box[1][d] % factor[d] == 0 or box[1][d] == level.size[d]
            if k:
                pieces = [
                    dict(plan.consumers(p))[task]
                    for p in plan.producers(task)
                    if task in dict(plan.consumers(p))
                ]
                assert sum(np.prod(np.subtract(b[1], b[0])) for b in pieces) == np.prod(
                    np.subtract(box[1], box[0])
                )
            covered += int(np.prod(np.subtract(box[1], box[0])))
        assert covered == int(np.prod(level.size))


def _npy(
    tmp_path: pathlib.Path, dtype: str = "uint8", shape: tuple[int, ...] = (20, 30, 40)
) -> str:
    np.save(tmp_path / "vol.npy", np.zeros(shape, dtype=dtype))
    return str(tmp_path / "vol.npy")


BAD = [
    ("factor zero", {"mips": 1, "factor": (2, 0, 2)}, "positive integers"),
    ("factor one", {"mips": 1, "factor": (1, 1, 1)}, "at least one"),
    ("too many mips", {"mips": 9}, "too many"),
    ("negative mips", {"mips": -1}, "non-negative"),
    ("unknown method", {"mips": 1, "downsample": "median"}, "is not a downsampling method"),
    ("factor without mips", {"factor": (2, 2, 1)}, "add mips \\(levels above the base"),
    (
        "average of labels",
        {"mips": 1, "layer_type": "segmentation", "downsample": "average"},
        "blends label ids",
    ),
    (
        "murmurhash",
        {"mips": 1, "hash": "murmurhash3_x86_128", "minishard_bits": 1, "shard_bits": 2},
        "spatial-box shards",
    ),
    ("gpu with jpeg", {"mips": 1, "engine": "gpu", "encoding": "jpeg"}, "GPU engine encodes"),
    ("scale key clash", {"mips": 1, "scale_key": "2_2_2"}, "unique"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_pyramids_are_refused_before_anything_is_written(
    tmp_path: pathlib.Path, case: tuple
) -> None:
    _, options, message = case
    dest = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        api.convert(_npy(tmp_path), str(dest), scheduler="sync", progress=False, **options)
    assert not dest.exists()


def test_without_mips_nothing_changes(tmp_path: pathlib.Path) -> None:
    """No mips and mips=0 are the same single level, with no pyramid: precomputed's `info`;
    zarr3's bare array (`zarr_layout="array"`); or, in zarr3's default OME-Zarr layout, that
    same array one level down (0/) and a group naming it alone, with no downsampling method."""
    source = _npy(tmp_path)
    plans = {}
    for name, options in [
        ("precomputed", dict(format="precomputed")),
        ("array", dict(format="zarr3", zarr_layout="array")),
        ("ome", dict(format="zarr3")),
    ]:
        default = api.plan(source, "memory://a", **options, **SMALL)
        zero = api.plan(source, "memory://a", mips=0, **options, **SMALL)
        assert default.pyramid is None and "levels" not in default.describe()
        assert default.metadata_documents() == zero.metadata_documents()
        assert [t.key for t in default.shards()] == [t.key for t in zero.shards()]
        plans[name] = default
    docs = {name: plan.metadata_documents() for name, plan in plans.items()}
    assert [key for key, _ in docs["precomputed"]] == ["info"]
    assert [key for key, _ in docs["array"]] == ["zarr.json"]
    assert [key for key, _ in docs["ome"]] == ["0/zarr.json", "zarr.json"]
    assert docs["ome"][0][1] == docs["array"][0][1]
    (multiscale,) = docs["ome"][1][1]["attributes"]["ome"]["multiscales"]
    assert [d["path"] for d in multiscale["datasets"]] == ["0"] and "type" not in multiscale
    bare = [t.key for t in plans["array"].shards()]
    assert bare and [t.key for t in plans["ome"].shards()] == [f"0/{key}" for key in bare]


def test_plan_command_shows_every_level(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _npy(tmp_path, shape=(21, 38, 45))
    args = ["plan", source, str(tmp_path / "out"), "--chunk-size", "16,16,8", "--mips", "2"]
    assert cli_main([*args, "--factor", "2,2,1"]) == 0
    out = capsys.readouterr().out
    assert "pyramid      3 levels, factors as given, downsample average" in out
    for key in ("1_1_1: 45 x 38 x 21", "2_2_1: 23 x 19 x 21", "4_4_1: 12 x 10 x 21"):
        assert key in out
    assert "peak per task" in out and "/shard" in out
    assert cli_main([*args, "--json", "--downsample", "max"]) == 0
    levels = json.loads(capsys.readouterr().out)["levels"]
    assert [row["key"] for row in levels] == ["1_1_1", "2_2_2", "4_4_4"]
    for row in levels:
        assert {"shards", "shard_shape_chunks_xyz", "estimated_peak_bytes_per_task"} <= set(row)
    with pytest.raises(SystemExit):  # argparse refuses it with a usage message
        cli_main([*args[:3], "--mips", "lots"])


# -- end to end -----------------------------------------------------------------------------------


_image = functools.partial(volumes.smooth_image_zyx, SIZE_XYZ)
_labels = functools.partial(volumes.cell_labels_zyx, SIZE_XYZ)


def _xyzc(vol: np.ndarray) -> np.ndarray:
    return vol.T[..., None] if vol.ndim == 3 else np.transpose(vol, (3, 2, 1, 0))


def _levels_precomputed(dest: pathlib.Path, count: int) -> list[list[np.ndarray]]:
    # Imported here: the offline GPU run (benchmarks/gpu) has no CloudVolume, and the module's
    # GPU tests need none.
    CloudVolume = pytest.importorskip("cloudvolume").CloudVolume  # noqa: N806
    out = []
    for k in range(count):
        via_ts = ts.open(
            {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/", "scale_index": k}
        ).result()
        via_cv = CloudVolume(f"file://{dest}", mip=k, progress=False)
        out.append([np.asarray(via_ts.read().result()), np.asarray(via_cv[:, :, :, :])])
    return out


def _levels_zarr3(dest: pathlib.Path, count: int) -> list[list[np.ndarray]]:
    group = zarr.open_group(str(dest), mode="r")
    out = []
    for k in range(count):
        via_ts = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/{k}/"}).result()
        out.append([np.asarray(via_ts.read().result()), np.asarray(group[str(k)][...])])
    return out


E2E = [
    # name, format, volume, options (method defaults by layer type)
    ("pc-uint8-average-222", "precomputed", _image, dict(mips=2, voxel_offset=(3, 5, 1))),
    (
        "pc-cseg-mode-221",
        "precomputed",
        _labels,
        dict(mips="auto", factor=(2, 2, 1), encoding="compressed_segmentation"),
    ),
    (
        "pc-float32-max-222",
        "precomputed",
        lambda: _image("float32"),
        dict(mips=2, downsample="max"),
    ),
    (
        "pc-uint16-striding-221-odd-chunks",
        "precomputed",
        lambda: _image("uint16"),
        dict(mips=2, factor=(2, 2, 1), downsample="striding", chunk_size=(15, 13, 7)),
    ),
    ("zarr-2ch-average-221", "zarr3", lambda: _image("uint16", 2), dict(mips=2, factor=(2, 2, 1))),
    (
        "zarr-uint32-mode-222",
        "zarr3",
        lambda: _labels("uint32"),
        dict(mips="auto", layer_type="segmentation"),
    ),
    ("zarr-int16-min-222", "zarr3", lambda: _image("int16"), dict(mips=1, downsample="min")),
    # Level shards that do not nest: producers feeding several tasks of the level above.
    (
        "pc-uint8-average-331-shared-producers",
        "precomputed",
        _image,
        dict(mips=2, factor=(3, 3, 1), chunk_size=(12, 12, 12), target_shard_bytes=5000),
    ),
    (
        "zarr-uint8-average-222-shared-producers",
        "zarr3",
        _image,
        dict(mips=2, shard_shape=(48, 48, 16)),
    ),
]


@pytest.mark.parametrize("case", E2E, ids=[c[0] for c in E2E])
def test_every_level_equals_the_reference_downsample(
    tmp_path: pathlib.Path, client: Any, case: tuple
) -> None:
    _, fmt, make, options = case
    vol = make()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    plan = api.plan(str(tmp_path / "vol.npy"), str(dest), format=fmt, **{**SMALL, **options})
    assert plan.pyramid is not None
    manifest = api.convert(plan, client=client, progress=False)
    assert isinstance(manifest, api.Manifest)
    levels = plan.pyramid.levels
    want = reference_pyramid(_xyzc(vol), plan.pyramid.steps, plan.pyramid.method)
    if fmt == "precomputed":
        info = json.loads((dest / "info").read_text())
        assert len(info["scales"]) == levels
        for k, readers in enumerate(_levels_precomputed(dest, levels)):
            for got in readers:
                np.testing.assert_array_equal(got, want[k], err_msg=f"level {k}")
    else:
        group = json.loads((dest / "zarr.json").read_text())
        multiscale = group["attributes"]["ome"]["multiscales"][0]
        assert [d["path"] for d in multiscale["datasets"]] == [str(k) for k in range(levels)]
        assert [a["name"] for a in multiscale["axes"]] == list(plan.layout.axes)
        for k, readers in enumerate(_levels_zarr3(dest, levels)):
            for got in readers:
                np.testing.assert_array_equal(_xyzc(got), want[k], err_msg=f"level {k}")
    assert {row.level for row in manifest.totals.levels} == set(range(levels))
    assert (
        manifest.totals.shards
        == sum(1 for k in range(levels) for _ in plan.level_plan(k).shards())
        - manifest.totals.empty_shards_skipped
    )
    report = api.verify(str(dest), str(tmp_path / "vol.npy"), full=True)
    assert report.ok, report.summary()
    assert report.chunks_compared == sum(plan.level_plan(k).chunk_count for k in range(levels))


def test_graph_splits_only_producers_that_feed_several_tasks(tmp_path: pathlib.Path) -> None:
    """A producer feeding one task hands it its whole result (no getter task, receipts
    travel up with it); one feeding several gets a piece task per consumer and a task that
    hands its receipts back. Every task comes after those it takes (post-order)."""
    for name in ("pc-uint8-average-331-shared-producers", "pc-uint8-average-222"):
        _, fmt, make, options = next(case for case in E2E if case[0] == name)
        np.save(tmp_path / "vol.npy", make())
        plan = api.plan(str(tmp_path / "vol.npy"), "memory://g", format=fmt, **{**SMALL, **options})
        assert plan.pyramid is not None
        fanout = {
            task.key: len(plan.consumers(task))
            for k in range(plan.pyramid.levels)
            for task in plan.level_plan(k).shards()
        }
        pending = api.convert(plan, scheduler="sync", compute=False)  # memory:// stays here
        assert isinstance(pending, api.PendingConversion)
        nodes = pending.nodes()
        keys = [node.key for node in nodes]
        pieces = sum(1 for key in keys if key.startswith("piece-"))
        receipt_lists = sum(1 for key in keys if key.startswith("receipts-"))
        assert pieces == sum(n for n in fanout.values() if n > 1)
        assert receipt_lists == sum(1 for n in fanout.values() if n > 1)
        assert sum(1 for key in keys if key.startswith("shard-")) == len(fanout)
        assert len(set(keys)) == len(keys)
        position = {key: i for i, key in enumerate(keys)}
        taken = [key for node in nodes for key in node.inputs]
        assert all(position[key] < position[node.key] for node in nodes for key in node.inputs)
        for node in nodes:  # each result is taken exactly as often as the stream says
            assert taken.count(node.key) == node.consumers, node.key
        # The receipts come back from the top level and the split producers' receipt tasks.
        carrying = {tuple(node.key.split("-")[:2]) for node in nodes if not node.consumers}
        assert carrying == {
            ("shard" if n == 0 else "receipts", key) for key, n in fanout.items() if n != 1
        }
        if name.endswith("shared-producers"):
            assert pieces > 0
        else:
            assert pieces == 0 and receipt_lists == 0


class _CountingSource(NpySource):
    """An .npy source that logs every box it reads to a file (from any worker process)."""

    def __init__(self, path: str, log: str):
        super().__init__(path)
        self.log = log

    def read(self, start_xyz: Any, stop_xyz: Any) -> np.ndarray:
        line = json.dumps([list(start_xyz), list(stop_xyz)]) + "\n"
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return super().read(start_xyz, stop_xyz)


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_each_source_voxel_is_read_once(tmp_path: pathlib.Path, client: Any, fmt: str) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    log = tmp_path / "reads.log"
    source = _CountingSource(str(tmp_path / "vol.npy"), str(log))
    plan = api.plan(source, str(tmp_path / "out"), format=fmt, mips=3, **SMALL)
    assert plan.pyramid is not None and plan.pyramid.levels == 4
    log.unlink()  # planning samples a few chunks; count the job's reads only
    api.convert(plan, client=client, progress=False)
    counts = np.zeros(SIZE_XYZ, dtype=np.int64)
    for line in log.read_text().splitlines():
        start, stop = json.loads(line)
        counts[start[0] : stop[0], start[1] : stop[1], start[2] : stop[2]] += 1
    assert counts.min() == 1 and counts.max() == 1
    for k, readers in enumerate(
        _levels_precomputed(tmp_path / "out", 4) if fmt == "precomputed" else []
    ):
        want = reference_pyramid(_xyzc(vol), [(2, 2, 2)] * 3, "average")[k]
        np.testing.assert_array_equal(readers[0], want)


def test_four_level_pyramid_tasks_stay_within_the_budget(tmp_path: pathlib.Path) -> None:
    """A base task whose shard is twice the budget (it spools, and hands up a quarter of the
    budget) and an upper-level task: both peak below the 16 MiB budget."""
    budget = 16 * 1024**2
    source = volumes.saved_noise(tmp_path, "noise", (128, 512, 512), seed=2)
    plan = api.plan(
        source,
        str(tmp_path / "out"),
        chunk_size=(32, 32, 32),
        compression="none",
        memory_budget=budget,
        target_shard_bytes=2 * 1024**3,
        min_shards=1,
        mips=3,
    )
    assert plan.level_count == 4
    assert all(plan.level_plan(k).peak_task_bytes < budget for k in range(4))
    base_task = next(iter(plan.shards()))
    assert plan.estimated_shard_bytes >= 2 * budget
    # one base task feeds the first level-1 task: its pieces are all that task is handed
    upper_task = next(iter(plan.level_plan(1).shards()))
    assert plan.producers(upper_task) == [base_task]
    store = open_store(str(tmp_path / "out"))
    tracemalloc.start()
    receipt, handoff = run_pyramid_shard(plan, base_task, store, spool_dir=str(tmp_path))
    _, base_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert receipt.size >= 2 * budget
    assert base_peak < budget, f"base task peak {base_peak / 2**20:.1f} MiB"

    pieces = [handoff[upper_task.key]] if upper_task.key in handoff else []
    assert pieces, "the first level-1 shard is fed by the first base shard"
    held = sum(p[1].nbytes for p in pieces)
    del handoff
    tracemalloc.start()
    run_pyramid_shard(plan, upper_task, store, pieces, spool_dir=str(tmp_path))
    _, upper_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held + upper_peak < budget, f"upper task peak {(held + upper_peak) / 2**20:.1f} MiB"


def test_resume_rewrites_only_a_missing_upper_level_shard(tmp_path: pathlib.Path) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    options = dict(mips=2, format="precomputed", **SMALL)
    api.convert(str(tmp_path / "vol.npy"), str(dest), scheduler="sync", progress=False, **options)
    victim = sorted((dest / "2_2_2").glob("*.shard"))[0]
    victim.unlink()
    (dest / MANIFEST_KEY).unlink()
    kept = {p: p.stat().st_mtime_ns for p in dest.rglob("*.shard")}
    manifest = api.convert(
        str(tmp_path / "vol.npy"),
        str(dest),
        scheduler="threads",
        progress=False,
        resume=True,
        **options,
    )
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.resumed_shards == manifest.totals.shards - 1
    assert victim.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())
    report = api.verify(str(dest), str(tmp_path / "vol.npy"), full=True)
    assert report.ok, report.summary()


# -- the GPU engine's pyramid path, run with NumPy as its array namespace ------------------------
def _pyramid_in_process(plan: Any, dest: pathlib.Path, xp: Any, resume: bool = False) -> None:
    """Every level's shard tasks in graph order, each fed its producers' pieces."""
    from shardwright.jobs.coordinator import write_metadata

    store = open_store(str(dest))
    write_metadata(plan, store)
    handed: dict[str, Any] = {}
    for level in range(plan.level_count):
        for task in plan.level_plan(level).shards():
            pieces = [handed[p.key][task.key] for p in plan.producers(task)]
            _, handed[task.key] = run_pyramid_shard(plan, task, store, pieces, resume=resume, xp=xp)


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


BATCHED_CASES = [
    ("precomputed", "uint8", dict(mips=3)),
    (
        "precomputed",
        "uint64",
        dict(
            mips="auto",
            factor=(2, 2, 1),
            layer_type="segmentation",
            encoding="compressed_segmentation",
        ),
    ),  # fmt: skip
    (
        "precomputed",
        "uint32",
        dict(mips=2, layer_type="segmentation", downsample="mode-nonzero"),
    ),
    ("zarr3", "uint16", dict(mips=2, compression="gzip")),
]


@pytest.mark.parametrize("case", BATCHED_CASES, ids=[f"{c[0]}-{c[1]}" for c in BATCHED_CASES])
def test_batched_pyramid_shards_equal_the_cpu_engines(tmp_path: pathlib.Path, case: tuple) -> None:
    """The GPU engine's pyramid tasks (batched pipeline, reductions in the array namespace)
    with NumPy write the CPU engine's bytes at every level; on a GPU CuPy must too."""
    fmt, dtype, options = case
    vol = _labels(dtype) if options.get("layer_type") == "segmentation" else _image(dtype)
    np.save(tmp_path / "vol.npy", vol)
    plan = api.plan(str(tmp_path / "vol.npy"), str(tmp_path / "cpu"), format=fmt, **SMALL,
                    **options)  # fmt: skip
    assert plan.pyramid is not None and plan.level_count >= 3
    _pyramid_in_process(plan, tmp_path / "cpu", None)
    _pyramid_in_process(plan, tmp_path / "batched", np)
    cpu, batched = _tree(tmp_path / "cpu"), _tree(tmp_path / "batched")
    assert len(cpu) > plan.level_count and cpu == batched
    if fmt == "precomputed":  # and the levels are the reference pyramid
        levels = _levels_precomputed(tmp_path / "batched", plan.level_count)
        want = reference_pyramid(_xyzc(vol), plan.pyramid.steps[:1], plan.pyramid.method)
        for k in range(2):
            np.testing.assert_array_equal(levels[k][0], want[k])
    # Resuming into a complete output keeps every shard and still hands the pieces up.
    _pyramid_in_process(plan, tmp_path / "batched", np, resume=True)
    assert _tree(tmp_path / "batched") == batched


@pytest.mark.gpu
def test_gpu_pyramid_shards_equal_the_cpu_engines(tmp_path: pathlib.Path) -> None:
    import cupy

    for fmt, dtype, options in BATCHED_CASES:
        vol = _labels(dtype) if options.get("layer_type") == "segmentation" else _image(dtype)
        np.save(tmp_path / "vol.npy", vol)
        dest = tmp_path / f"{fmt}-{dtype}"
        plan = api.plan(str(tmp_path / "vol.npy"), str(dest / "cpu"), format=fmt, **SMALL,
                        **options)  # fmt: skip
        _pyramid_in_process(plan, dest / "cpu", None)
        _pyramid_in_process(plan, dest / "gpu", cupy)
        assert _tree(dest / "cpu") == _tree(dest / "gpu"), (fmt, dtype)
