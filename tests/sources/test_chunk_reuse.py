"""A run of box reads that share chunks fetches each once (sources/chunk_reuse.py): what a
group of mesh blocks, each read one voxel into the next, fetches of a CloudVolume-written
precomputed scale on disk, counted by the files opened; the voxels are those read plainly."""

from __future__ import annotations

import pathlib
import threading

import numpy as np
import pytest

from shardwright.sources import open_source
from tests.support import label_shapes
from tests.support.opened import opened_below

pytest.importorskip("cloudvolume")

# blocks of 32^3 along x, each read one voxel into the next (as grid.read_box does)
BOXES = [((x, 0, 0), (min(x + 33, 128), 33, 33)) for x in range(0, 128, 32)]


def test_shared_chunks_are_fetched_once_and_read_the_same(tmp_path: pathlib.Path) -> None:
    label_shapes.write_precomputed(tmp_path / "seg")  # 128 x 96 x 64, chunks of 32^3
    source = open_source(str(tmp_path / "seg"))
    plain = [source.read(*box) for box in BOXES]
    with opened_below(tmp_path / "seg") as without:
        for box in BOXES:
            source.read(*box)
    with opened_below(tmp_path / "seg") as opens, source.reusing(BOXES) as reuse:
        reused = [source.read(*box) for box in BOXES]
    # each box touches 2 x 2 x 2 chunks but the last (1 x 2 x 2): 28 plain, 16 shared once
    assert sum(without.values()) == 28
    assert sum(opens.values()) == 16 == reuse.fetched
    assert set(opens.values()) == {1}
    assert reuse.kept == {}  # nothing held once the last box was read
    assert all(np.array_equal(a, b) for a, b in zip(plain, reused, strict=True))


def test_reuse_is_this_threads_alone(tmp_path: pathlib.Path) -> None:
    """Another thread reading the same source meanwhile (another task of the worker) fetches
    as it would have, and takes nothing from this thread's run."""
    label_shapes.write_precomputed(tmp_path / "seg")
    source = open_source(str(tmp_path / "seg"))
    box = BOXES[1]
    with opened_below(tmp_path / "seg") as opens, source.reusing([box, box]) as reuse:
        source.read(*box)
        other = threading.Thread(target=source.read, args=box)
        other.start()
        other.join()
        source.read(*box)
    assert reuse.fetched == 8
    assert sum(opens.values()) == 16  # 8 by this run, 8 by the other thread
