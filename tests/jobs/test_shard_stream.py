"""The shard stream (`jobs/shard_stream.py`) as the submission window sees it, without a
cluster: a pyramid's tasks each after the tasks it takes, post-order so that the stream keeps
a frontier, not the pyramid; a shared producer split into pieces; the kinds that spool (one
pipeline for generated objects and annotations) make their shard tasks only after the
barrier, from what the spool tasks put in the exchange."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd

from shardwright import api
from shardwright.generation.exchange import BlockIndex, Exchange, SpooledShardTask
from shardwright.jobs.shard_stream import STREAMS, Barrier, Node, shard_nodes
from shardwright.planning import ConversionPlan, ShardTask


def test_every_dataset_kind_has_its_stream() -> None:
    from shardwright.common.vocabulary import DatasetKind, names

    assert sorted(STREAMS) == sorted(names(DatasetKind))


def test_a_pyramid_streams_each_task_after_those_it_takes(tmp_path: pathlib.Path) -> None:
    """Every shard of every level once; every input emitted before the node that takes it and
    counted in its `consumers` (a producer several tasks take: a piece per task and a node
    for its receipts); the results alive at any point (emitted, some consumer
    still to come) far fewer than the base's shards."""
    volume = np.random.default_rng(0).integers(0, 255, (96, 80, 40), dtype=np.uint8)
    np.save(tmp_path / "v.npy", volume)
    plan = api.plan(str(tmp_path / "v.npy"), str(tmp_path / "out"), format="zarr3", mips=3,
                    chunk_size=(8, 8, 8), target_shard_bytes=4096, factor=(2, 2, 2),
                    resolution=(8, 8, 8))  # fmt: skip
    assert isinstance(plan, ConversionPlan) and plan.level_count == 4
    nodes = list(shard_nodes(plan, "t"))
    assert all(isinstance(node, Node) for node in nodes)
    keys = [node.key for node in nodes]
    assert len(set(keys)) == len(keys)
    tasks = [n.shard for n in nodes if n.key.startswith("shard-")]
    planned = [t for k in range(plan.level_count) for t in plan.level_plan(k).shards()]
    assert sorted(t.key for t in tasks) == sorted(t.key for t in planned)  # type: ignore[union-attr]
    index = {node.key: node for node in nodes}
    seen: set[str] = set()
    taken: dict[str, int] = {}
    alive, most = 0, 0
    for node in nodes:
        assert set(node.inputs) <= seen, node.key
        for key in node.inputs:
            taken[key] = taken.get(key, 0) + 1
            if taken[key] == index[key].consumers:
                alive -= 1
        seen.add(node.key)
        alive += node.consumers > 0
        most = max(most, alive)
    assert all(taken.get(n.key, 0) == n.consumers for n in nodes)
    for shared in (n for n in nodes if n.key.startswith("shard-") and n.consumers > 1):
        assert f"receipts-{shared.shard.key}-t" in seen  # type: ignore[union-attr]
    base_shards = plan.shard_count
    assert base_shards > 40 and most < base_shards / 4, (most, base_shards)
    levels = [n.shard.level for n in nodes if isinstance(n.shard, ShardTask)]
    assert levels[-1] == plan.level_count - 1


def test_a_spooling_kind_makes_its_shard_tasks_from_the_exchange_after_the_barrier(
    tmp_path: pathlib.Path,
) -> None:
    """Annotations (the pipeline generated meshes and skeletons share): a task per table
    partition, each collecting into the exchange, then the barrier; the shard tasks are made
    only when the stream goes on past it, one per shard the exchange holds, in order, each
    with its ranges in spool order and its output's directory."""
    rng = np.random.default_rng(1)
    table = pd.DataFrame({"x": rng.uniform(0, 100, 200), "y": rng.uniform(0, 100, 200),
                          "z": rng.uniform(0, 10, 200)})  # fmt: skip
    plan = api.plan(table, str(tmp_path / "syn"), annotation_type="point",
                    resolution=(8, 8, 40))  # fmt: skip
    exchanges: dict[str, Exchange] = {}
    stream = shard_nodes(plan, "t", exchanges)
    before: list[Any] = []
    for node in stream:
        before.append(node)
        if isinstance(node, Barrier):
            break
    partitions = before[:-1]
    assert partitions and all(n.collect is not None for n in partitions)
    assert len(partitions) == len(list(plan.partitions()))  # type: ignore[attr-defined]
    (table_of_job,) = exchanges.values()
    rows = np.array([[0, 1, 10, 20], [1, 0, 0, 5], [0, 0, 0, 10], [0, 1, 0, 10]], np.int64)
    table_of_job.add(BlockIndex("spool-b", rows[:2]))
    table_of_job.add(BlockIndex("spool-a", rows[2:]))
    after = list(stream)
    tasks = [n.shard for n in after]
    assert all(isinstance(t, SpooledShardTask) for t in tasks)
    assert [(t.output, t.shard_number) for t in tasks] == [(0, 0), (0, 1), (1, 0)]
    assert tasks[1].ranges == (("spool-a", 0, 10), ("spool-b", 10, 20))
    layout = plan.layout  # type: ignore[attr-defined]
    assert tasks[2].key == f"{layout.key(1)}/{layout.shardings[1].shard_filename(0)}"
    assert [n.key for n in after] == [f"shard-{t.key}-t" for t in tasks]
