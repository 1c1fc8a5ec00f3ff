"""A block group's reads: the layer where it meets the next groups comes from their faces
where they have run (none of those chunks fetched), from the source where they have not or
where a face does not prove itself, and every block's voxels are the source's either way."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from shardwright import api
from shardwright.additions import AdditionPlan
from shardwright.engine.block_reads import GroupReads
from shardwright.engine.generated_objects import BlockProducer, block_key, run_block_group
from shardwright.generation import faces
from shardwright.lifecycle.runs import FencedStore, JobRun
from shardwright.planning.generated import GeneratedPlan
from shardwright.sources import chunk_reuse
from shardwright.stores import open_store
from tests.support import label_shapes

pytest.importorskip("zmesh")


def _meshes(tmp_path: pathlib.Path, **more: object) -> GeneratedPlan:
    path = tmp_path / "seg"
    label_shapes.write_precomputed(path)  # 128 x 96 x 64, chunks of 32^3
    plan = api.plan(str(path), generate_meshes=True, mesh_block=(16, 32, 16), **more)
    assert isinstance(plan, AdditionPlan)
    meshes = plan.companions[0]
    assert isinstance(meshes, GeneratedPlan) and meshes.generation.grid.group_count > 1
    return meshes


def _run_groups(meshes: GeneratedPlan, store: FencedStore, *, last_first: bool) -> list[int]:
    """Every group's blocks read in order, each checked against the source's own read of its
    box; (parts taken from faces, parts read from the source) over all groups."""
    grid, limit = meshes.generation.grid, meshes.source.shape_xyz
    handed = fetched = 0
    for group in grid.groups(last_first=last_first):
        positions = grid.group_blocks(group)
        reads = GroupReads(meshes, positions, store)
        with chunk_reuse.reusing_reads(meshes.source, reads.source_boxes()):
            reads.hand_over()
            for position in positions:
                got = reads.read(position)
                want = meshes.source.read(*faces.read_box(grid, position, limit))
                assert got.dtype == want.dtype and np.array_equal(got, want), position
        handed, fetched = handed + reads.handed, fetched + reads.fetched
    return [handed, fetched]


def _store(meshes: GeneratedPlan, job: str) -> FencedStore:
    return FencedStore(open_store(meshes.dest), JobRun(job, f"run-{job}", "lease"))


def test_groups_run_last_first_take_every_layer_from_the_next_groups_faces(
    tmp_path: pathlib.Path,
) -> None:
    meshes = _meshes(tmp_path)
    handed, fetched = _run_groups(meshes, _store(meshes, "a"), last_first=True)
    assert handed > 0 and fetched == 0
    # run first to last, no group finds the faces it needs: it reads the source for them
    handed, fetched = _run_groups(meshes, _store(meshes, "b"), last_first=False)
    assert handed == 0 and fetched > 0


def test_groups_running_side_by_side_find_the_faces_handed_over_at_their_start(
    tmp_path: pathlib.Path,
) -> None:
    """Every group starts (hands over its faces) before any makes a block, as groups running
    at once on a cluster's workers do: in whatever order they then read, none fetches the layer
    where it meets another."""
    meshes = _meshes(tmp_path)
    store = _store(meshes, "f")
    grid = meshes.generation.grid
    started = []
    for group in grid.groups():  # first to last: the order in which no face would be there
        positions = grid.group_blocks(group)
        reads = GroupReads(meshes, positions, store)
        with chunk_reuse.reusing_reads(meshes.source, reads.source_boxes()):
            reads.hand_over()
        started.append((positions, reads))
    for positions, reads in started:
        for position in positions:
            reads.read(position)
    assert sum(r.handed for _, r in started) > 0 and sum(r.fetched for _, r in started) == 0


def test_a_face_that_does_not_prove_itself_is_read_from_the_source(
    tmp_path: pathlib.Path,
) -> None:
    meshes = _meshes(tmp_path)
    store = _store(meshes, "c")
    grid, limit = meshes.generation.grid, meshes.source.shape_xyz
    prefix = ".shardwright/exchange/faces/c/"
    spoiled = 0
    for position in grid.positions():
        for axis, box in faces.published(grid, position, limit):
            voxels = meshes.source.read(*box)
            name = f"{prefix}{faces.face_name(position, axis)}"
            if spoiled % 2:  # another box's face under this name (its header says so) ...
                moved = (tuple(max(0, a - 1) for a in box[0]), box[1])
                store.write_object(name, faces.encode(meshes.source.read(*moved), moved))
            else:  # ... or a torn one
                store.write_object(name, faces.encode(voxels, box)[:-5])
            spoiled += 1
    assert spoiled > 1
    handed, fetched = _run_groups(meshes, store, last_first=False)
    assert handed == 0 and fetched > 0


def test_another_jobs_faces_are_never_taken(tmp_path: pathlib.Path) -> None:
    meshes = _meshes(tmp_path)
    _run_groups(meshes, _store(meshes, "d"), last_first=True)
    handed, fetched = _run_groups(meshes, _store(meshes, "e"), last_first=False)
    assert handed == 0 and fetched > 0


def test_every_blocks_spool_is_the_one_its_whole_box_read_from_the_source_makes(
    tmp_path: pathlib.Path,
) -> None:
    """Meshes and skeletons of every block, made by the group tasks (last first, the layer
    where groups meet taken from faces): each block's spool is byte for byte the one its
    block makes when its whole box is read from the source."""
    meshes = _meshes(tmp_path, generate_skeletons=True)
    store = _store(meshes, "h")
    grid = meshes.generation.grid
    for group in grid.groups(last_first=True):
        run_block_group(meshes, group, store, resume=False, on_done=lambda done: done)
    assert store.list_keys(".shardwright/exchange/faces/h")  # the groups handed faces over
    for position in grid.positions():
        alone = BlockProducer(meshes, position).produce().to_bytes()
        assert store.read(block_key(meshes, position)) == alone, position
