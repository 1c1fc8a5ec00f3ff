"""The planning package on its own: both plan kinds through the `Plan` protocol, shard lists
that tile the chunk grid exactly once, epochs inside their shards and the budget, and index
sizes that readers fetch cheaply, on a volume too big to convert here."""

from __future__ import annotations

import itertools
import math
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright import api
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import PlanError
from shardwright.formats.precomputed.layout import PrecomputedLayout
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.formats.zarr3.layout import Zarr3Layout
from shardwright.planning import ConversionPlan, ObjectPlan, Plan, ShardTask
from shardwright.planning.geometry import epoch_shape
from shardwright.planning.sharding import MAX_MINISHARD, MAX_PRESHIFT
from tests.support import segment_objects, volumes


def _volume_plan(tmp_path: pathlib.Path, **options: object) -> ConversionPlan:
    source = volumes.saved(tmp_path, "vol", volumes.noise((40, 70, 90), seed=3))
    plan = api.plan(source, str(tmp_path / "out"), chunk_size=(16, 16, 8), **options)
    assert isinstance(plan, ConversionPlan)
    return plan


def _sparse_plan(tmp_path: pathlib.Path, **options: object) -> ConversionPlan:
    """A 64 MiB volume of sparse zeros, planned only: shards of several epochs each."""
    path = tmp_path / "sparse.npy"
    np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(200, 512, 640)).flush()
    plan = api.plan(
        str(path),
        str(tmp_path / "out"),
        chunk_size=(32, 32, 32),
        compression="none",
        target_shard_bytes=16 * 1024**2,
        memory_budget=16 * 1024**2,
        **options,
    )
    assert isinstance(plan, ConversionPlan)
    return plan


def _object_plan(tmp_path: pathlib.Path) -> ObjectPlan:
    directory = tmp_path / "mesh"
    segment_objects.write_multilod_meshes(directory, segment_objects.segment_ids(300))
    plan = api.plan(str(directory), str(tmp_path / "out-mesh"))
    assert isinstance(plan, ObjectPlan)
    return plan


def _check_protocol(plan: Plan, dataset: str) -> None:
    """What the graph, the lifecycle and the front ends use of any plan."""
    assert plan.dataset == dataset
    assert plan.source_url and plan.dest.endswith(("out", "out-mesh"))
    shards = list(plan.shards())
    assert len(shards) == plan.shard_count > 0
    assert len({s.key for s in shards}) == len(shards)
    assert sum(s.chunk_count for s in shards) > 0
    shared = plan.for_shard_tasks()
    assert shared.dataset == dataset and shared.companions == ()
    documents = plan.metadata_documents()
    assert documents[-1][0] in ("info", "zarr.json")
    assert plan.dest in plan.report()
    assert plan.describe()
    assert 0 < plan.spool_budget <= plan.options.memory_budget


def test_both_plan_kinds_offer_the_plan_protocol(tmp_path: pathlib.Path) -> None:
    _check_protocol(_volume_plan(tmp_path), DatasetKind.VOLUME)
    objects = _object_plan(tmp_path)
    _check_protocol(objects, DatasetKind.OBJECTS)
    # Each object shard task carries its own ids: the plan the tasks share holds none.
    assert objects.for_shard_tasks().ids_by_shard.size == 0
    assert sum(s.chunk_count for s in objects.shards()) == 300


@pytest.mark.parametrize(
    "options",
    [
        {"format": "precomputed"},
        {"format": "zarr3"},
        {"format": "precomputed", "mips": 2},
        {"format": "zarr3", "mips": 2, "factor": (2, 2, 1)},
    ],
    ids=["precomputed", "zarr3", "precomputed-pyramid", "zarr3-pyramid"],
)
def test_box_shards_tile_every_level_once_and_epochs_tile_each_shard(
    tmp_path: pathlib.Path, options: dict[str, object]
) -> None:
    plan = _sparse_plan(tmp_path, **options)
    several = 0
    for level in range(plan.level_count):
        here = plan.level_plan(level)
        covered = np.zeros(here.grid_shape[::-1], np.int32)
        for task in here.shards():
            assert task.level == level
            (x0, y0, z0), (x1, y1, z1) = task.chunk_start, task.chunk_stop
            covered[z0:z1, y0:y1, x0:x1] += 1
            epoch_cells = 0
            for start, stop in here.epochs(task):
                extent = [b - a for a, b in zip(start, stop, strict=True)]
                assert all(0 < e <= s for e, s in zip(extent, here.epoch_shape_chunks, strict=True))
                assert all(
                    a >= lo and b <= hi
                    for a, b, lo, hi in zip(
                        start, stop, task.chunk_start, task.chunk_stop, strict=True
                    )
                )
                epoch_cells += math.prod(extent)
            assert epoch_cells == task.chunk_count
            several += len(list(here.epochs(task))) > 1
        assert (covered == 1).all(), f"level {level}: chunks not in exactly one shard"
        assert here.peak_task_bytes <= plan.options.memory_budget
    assert several, "no shard of several epochs: the tiling was not exercised"


def test_pyramid_producers_and_consumers_agree(tmp_path: pathlib.Path) -> None:
    plan = _sparse_plan(tmp_path, mips=2)
    for level in range(1, plan.level_count):
        below = plan.level_plan(level - 1)
        for task in plan.level_plan(level).shards():
            producers = plan.producers(task)
            assert producers
            for producer in producers:
                consumers = [t.key for t, _ in plan.consumers(producer)]
                assert task.key in consumers
        assert {t.key for t in below.shards()} >= {
            p.key for t in plan.level_plan(level).shards() for p in plan.producers(t)
        }


@pytest.mark.parametrize("budget", [1, 10, 1000])
@pytest.mark.parametrize("shard", [(1, 1, 1), (8, 4, 2), (16, 16, 16)])
def test_epochs_fit_the_budget_and_keep_whole_blocks(
    budget: int, shard: tuple[int, int, int]
) -> None:
    for step in [(1, 1, 1), (2, 2, 1)]:
        shape = epoch_shape(shard, 1, budget, step)
        assert all(0 < e <= s or s < t for e, s, t in zip(shape, shard, step, strict=True))
        assert all(e % t == 0 or e == s for e, s, t in zip(shape, shard, step, strict=True))
        if math.prod(shape) > budget:  # only when no axis can shrink further
            assert all(e <= max(t, 1) for e, t in zip(shape, step, strict=True))


def test_a_large_volume_gets_cheap_indexes_and_many_box_shards(tmp_path: pathlib.Path) -> None:
    """512 MiB of sparse zeros (never converted here): the identity-hash box sharding keeps
    the minishard index within 2**10 chunks and the shard index within 2**9 minishards."""
    path = tmp_path / "big.npy"
    big = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(512, 1024, 1024))
    del big
    plan = api.plan(str(path), str(tmp_path / "out"), chunk_size=(64, 64, 32))
    assert isinstance(plan, ConversionPlan) and isinstance(plan.layout, PrecomputedLayout)
    spec = plan.layout.sharding
    assert spec.hash == "identity" and not plan.scattered
    assert spec.preshift_bits <= MAX_PRESHIFT and spec.minishard_bits <= MAX_MINISHARD
    described = plan.describe()
    assert described["shard_index_bytes"] <= 8 * 1024
    assert described["minishard_index_bytes"] <= 24 * 1024
    assert plan.shard_count == len(list(itertools.islice(plan.shards(), 10**6)))
    assert plan.shard_count >= 2


def _shards_one_by_one(plan: ConversionPlan) -> list[ShardTask]:
    """The box shards as the planner made them before batching: one shard at a time, its
    Morton code and key computed alone (the reference the batched enumeration must equal)."""
    grid, step = plan.grid_shape, plan.shard_shape_chunks
    out = []
    for z0 in range(0, grid[2], step[2]):
        for y0 in range(0, grid[1], step[1]):
            for x0 in range(0, grid[0], step[0]):
                start = (x0, y0, z0)
                x1, y1, z1 = (min(a + s, g) for a, s, g in zip(start, step, grid, strict=True))
                number = None
                layout = plan.layout
                if isinstance(layout, PrecomputedLayout):
                    spec = layout.sharding
                    code = int(compressed_morton_code(np.array([start]), grid)[0])
                    number = code >> (spec.preshift_bits + spec.minishard_bits)
                    key = f"{layout.scale.key}/{spec.shard_filename(number)}"
                else:
                    assert isinstance(layout, Zarr3Layout)
                    cell = {"x": x0 // step[0], "y": y0 // step[1], "z": z0 // step[2], "c": 0}
                    coords = tuple(cell[a] for a in layout.axes)
                    prefix = f"{plan.level}/" if layout.ome_group else ""
                    key = prefix + layout.meta.chunk_key(coords)
                out.append(ShardTask(key, start, (x1, y1, z1), number, level=plan.level))
    return out


@settings(max_examples=80)
@given(
    size=st.tuples(*[st.integers(1, 120)] * 3),
    chunk=st.tuples(*[st.integers(4, 40)] * 3),  # at most 30^3 chunks: a quick reference
    fmt=st.sampled_from(["precomputed", "zarr3"]),
    bits=st.integers(0, 6),
    mips=st.sampled_from([0, 1]),
)
def test_batched_shard_enumeration_equals_the_one_by_one_generator(
    tmp_path_factory: pytest.TempPathFactory,
    size: tuple[int, int, int],
    chunk: tuple[int, int, int],
    fmt: str,
    bits: int,
    mips: int,
) -> None:
    """Same shards, same order, same keys and numbers, on random geometries and shard sizes,
    every pyramid level included. Every geometry drawn plans, but one: a pyramid of a single
    voxel, which the planner refuses for that reason alone."""
    tmp = tmp_path_factory.mktemp("enumeration")
    chunk = tuple(min(c, s) for c, s in zip(chunk, size, strict=True))
    path = tmp / "v.npy"
    np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=size[::-1]).flush()
    sharding: dict[str, object] = (
        {"preshift_bits": bits // 2, "minishard_bits": bits - bits // 2}
        if fmt == "precomputed"
        else {"target_shard_bytes": max(1, 2**bits) * math.prod(chunk)}
    )

    def planned() -> object:
        return api.plan(
            str(path), str(tmp / "out"), format=fmt, chunk_size=chunk, compression="none",
            mips=mips or None, **(sharding if not mips else {}),
        )  # fmt: skip

    if mips and size == (1, 1, 1):
        with pytest.raises(PlanError, match="there is nothing to downsample"):
            planned()
        return
    plan = planned()
    assert isinstance(plan, ConversionPlan)
    for level in range(plan.level_count):
        here = plan.level_plan(level)
        assert list(here.shards()) == _shards_one_by_one(here)
