"""A Zarr v2 level's chunk objects (levels added to an OME-Zarr 0.4 group) are the same bytes
from the CPU producer and from the batched one over NumPy (the GPU engine's CPU twin): each
level's tasks run by hand in the order the job's graph gives, the pieces handed up."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from shardwright import api
from shardwright.engine.pyramid import run_pyramid_shard
from shardwright.stores import open_store


def _group(path: pathlib.Path) -> None:
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    image = np.random.default_rng(3).integers(0, 60000, (2, 12, 70, 50), dtype=np.uint16)
    fmt = FormatV04()
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store)
    write_image(image, root, axes="czyx", fmt=fmt, scale_factors=[],
                storage_options={"chunks": (1, 1, 16, 16)})  # fmt: skip


def _objects(levels: Any, out: pathlib.Path, xp: Any) -> dict[str, bytes]:
    """Every chunk object of the new levels, written to `out` by tasks run level by level."""
    store = open_store(str(out))
    handed: dict[str, list[Any]] = {}
    for level in range(levels.level_count):
        for task in levels.level_plan(level).shards():
            _, handoff = run_pyramid_shard(levels, task, store, handed.pop(task.key, []), xp=xp)
            for key, piece in handoff.items():
                handed.setdefault(key, []).append(piece)
    return {key: store.read(key) for key in store.list_keys()}


def test_cpu_and_batched_producers_write_the_same_chunk_objects(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "group.ome.zarr"
    _group(path)
    plan = api.plan(str(path), mips=2, factor=(2, 2, 2))
    levels = plan.levels
    assert levels is not None and levels.format == "zarr2"
    cpu = _objects(levels, tmp_path / "cpu", None)
    batched = _objects(levels, tmp_path / "batched", np)
    assert cpu == batched
    # Level 1: 25 x 35 x 6 voxels (x, y, z) in chunks of 16 x 16 x 2, two of the group's
    # one-slice chunks deep (whole 2 x 2 x 2 blocks of level 2), both channels in each.
    assert sorted(k for k in cpu if k.startswith("s1/") and "zarray" not in k) == sorted(
        f"s1/0/{z}/{y}/{x}" for z in range(3) for y in range(3) for x in range(2)
    )
