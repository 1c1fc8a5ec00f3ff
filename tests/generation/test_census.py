"""A segmentation's census: each block's segments with their voxel counts and boxes against a
per-id NumPy reference, joined over blocks as one count of the whole, and the table objects."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardwright.errors import MeshFormatError
from shardwright.generation import census

Triple = tuple[int, int, int]


@given(
    core=hnp.arrays(np.uint64, hnp.array_shapes(min_dims=3, max_dims=3, max_side=9),
                    elements=st.sampled_from([0, 1, 7, 2**40, 2**64 - 1])),
    start=st.tuples(*[st.integers(0, 1000)] * 3),
)  # fmt: skip
def test_a_blocks_census_is_each_ids_count_and_box(core: np.ndarray, start: Triple) -> None:
    """Both ways, fastremap's numbering and NumPy's sort (verify's without the meshes
    extra), any memory order: each id's voxels and box."""
    for counted in (census.block_census(core, start),
                    census.block_census(np.asfortranarray(core), start),
                    census._sorted_census(core, start)):  # fmt: skip
        assert set(counted) == {int(i) for i in np.unique(core) if i}
        for segment, (voxels, (low, high)) in counted.items():
            where = np.argwhere(core == np.uint64(segment))
            assert voxels == len(where)
            assert low == tuple((where.min(axis=0) + start).tolist())
            assert high == tuple((where.max(axis=0) + 1 + start).tolist())


def test_the_census_without_the_meshes_extra_is_numpys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fastremap is not installed the census still counts, by NumPy's sort."""
    import sys

    core = np.zeros((6, 5, 4), np.uint64)
    core[1:3, 2:5, 0:2] = 2**40
    core[5, 0, 3] = 7
    expected = census.block_census(core, (10, 20, 30))
    monkeypatch.setitem(sys.modules, "fastremap", None)  # import fastremap raises ImportError
    assert (
        census.block_census(core, (10, 20, 30))
        == expected
        == {2**40: (12, ((11, 22, 30), (13, 25, 32))), 7: (1, ((15, 20, 33), (16, 21, 34)))}
    )


@given(
    labels=hnp.arrays(np.uint8, (12, 10, 6), elements=st.integers(0, 4)),
    cut=st.tuples(st.integers(1, 11), st.integers(1, 9), st.integers(1, 5)),
)
def test_blocks_joined_count_the_whole_volume(labels: np.ndarray, cut: Triple) -> None:
    whole = census.block_census(labels, (0, 0, 0))
    parts: dict[int, list] = {}
    for xs in ((0, cut[0]), (cut[0], 12)):
        for ys in ((0, cut[1]), (cut[1], 10)):
            for zs in ((0, cut[2]), (cut[2], 6)):
                block = labels[xs[0] : xs[1], ys[0] : ys[1], zs[0] : zs[1]]
                found = census.block_census(block, (xs[0], ys[0], zs[0]))
                for segment in whole:
                    parts.setdefault(segment, []).append(found.get(segment, (0, census.NO_BOX)))
    assert {s: census.joined(p) for s, p in parts.items()} == whole


def test_a_table_reads_back_and_says_its_rows_from_its_size() -> None:
    rows = [(5, 10, ((0, 1, 2), (3, 4, 5))), (2**64 - 1, 1, ((7, 7, 7), (8, 8, 8)))]
    data = census.encode(rows)
    assert data.startswith(census.MAGIC) and len(data) == len(census.MAGIC) + 2 * 40
    assert census.row_count(len(data)) == 2 and census.row_count(3) == 0
    table = census.decode(data)
    assert [(int(r["segment"]), int(r["voxels"]), (tuple(r["low"].tolist()),
             tuple(r["high"].tolist()))) for r in table] == rows  # fmt: skip
    assert census.decode(census.encode([])).size == 0
    for bad in (data[:-1], b"SWCENSUS00" + data[10:], b""):
        with pytest.raises(MeshFormatError, match="not a census table"):
            census.decode(bad)
