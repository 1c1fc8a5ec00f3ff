"""The block spool format and the pieces of generated meshes: bytes in, bytes out."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.errors import MeshFormatError
from shardwright.formats.precomputed.meshes import zorder
from shardwright.generation import census, exchange
from shardwright.generation.exchange import MESH, SKELETON, BlockIndex, Exchange, Piece
from shardwright.generation.surfaces import lod_count, weld


def _surface(segment: int, rng: np.random.Generator) -> Piece:
    vertices = rng.random((5, 3), np.float32) * 100
    faces = rng.integers(0, 5, (4, 3)).astype(np.uint32)
    return Piece(segment, int(rng.integers(1, 1000)), (1, 2, 3), vertices, faces)


def test_a_spool_object_reads_back_section_by_section() -> None:
    rng = np.random.default_rng(1)
    meshes = [_surface(s, rng) for s in (5, 9)]
    edges = np.array([[0, 1], [1, 2]], np.uint32)
    skeleton = Piece(7, 40, (0, 0, 1), np.ones((3, 3), np.float32), edges, np.full(3, 2.5),
                     ((3, 4, 130), (9, 6, 140)))  # fmt: skip
    parts, index = exchange.spool(
        {(MESH, 3): [p.to_bytes() for p in meshes], (SKELETON, 0): [skeleton.to_bytes()]}
    )
    blob = b"".join(parts)
    trailer = blob[-exchange.TRAILER :]
    size = exchange.index_size(trailer)
    parsed = exchange.parse_index(blob[-exchange.TRAILER - size : -exchange.TRAILER])
    assert parsed.tolist() == index.tolist()
    by_section = {(int(r["output"]), int(r["shard"])): r for r in parsed}
    row = by_section[(MESH, 3)]
    got = list(exchange.read_pieces(blob[row["start"] : row["stop"]], MESH))
    assert [p.segment for p in got] == [5, 9]
    for want, have in zip(meshes, got, strict=True):
        np.testing.assert_array_equal(have.vertices, want.vertices)
        np.testing.assert_array_equal(have.links, want.links)
        assert (have.voxels, have.block) == (want.voxels, want.block)
    row = by_section[(SKELETON, 0)]
    (bone,) = exchange.read_pieces(blob[row["start"] : row["stop"]], SKELETON)
    assert bone.radii is not None and bone.radii.tolist() == [2.5] * 3
    assert bone.links.tolist() == [[0, 1], [1, 2]]
    assert bone.box == ((3, 4, 130), (9, 6, 140)) and got[0].box == census.NO_BOX
    with pytest.raises(MeshFormatError, match="truncated"):
        list(exchange.read_pieces(blob[row["start"] : row["stop"] - 1], SKELETON))
    with pytest.raises(MeshFormatError, match="not a block spool"):
        exchange.index_size(b"x" * exchange.TRAILER)


def test_the_exchange_hands_each_shard_its_ranges_in_block_order() -> None:
    table = Exchange()
    rows = [(MESH, 2, 0, 10), (MESH, 4, 10, 30), (SKELETON, 2, 30, 35)]
    for key in ("block-1_0_0", "block-0_0_0"):  # finished out of order
        table.add(BlockIndex(key, np.array(rows, exchange.ENTRY)))
    assert table.shards(MESH) == [2, 4] and table.shards(SKELETON) == [2]
    assert table.ranges(MESH, 4) == (("block-0_0_0", 10, 30), ("block-1_0_0", 10, 30))
    assert table.ranges(MESH, 3) == ()


def test_fragment_positions_sort_along_the_z_curve_x_first() -> None:
    positions = np.array([[1, 1, 1], [0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 0], [2, 0, 0]])
    ordered = positions[zorder(positions)].tolist()
    assert ordered == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [2, 0, 0]]


@pytest.mark.parametrize(
    ("blocks", "lods"),
    [([[3, 3, 3]], 1), ([[0, 0, 0], [1, 0, 0]], 2), ([[1, 0, 0], [2, 0, 0]], 3),
     ([[0, 0, 0], [0, 5, 0]], 4)],
)  # fmt: skip
def test_auto_levels_of_detail_end_at_one_fragment(blocks: list, lods: int) -> None:
    positions = np.array(blocks)
    assert lod_count(positions) == lods
    assert len({tuple(p >> (lods - 1)) for p in positions}) == 1


def test_welding_joins_parts_and_drops_triangles_of_no_area() -> None:
    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0],
                         [2, 0, 0]], np.float32)  # fmt: skip
    faces = np.array([[0, 1, 2], [3, 5, 4], [0, 1, 6]], np.uint32)  # the last is a line
    welded, kept = weld(vertices, faces)
    assert len(welded) == 5 and len(kept) == 2
    assert {tuple(welded[i]) for i in kept.ravel()} == {(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)}


def test_a_blocks_census_counts_each_segment_and_its_box() -> None:
    """Against numpy's own count and extent of each id, in the level's voxels."""
    rng = np.random.default_rng(3)
    core = rng.choice(np.array([0, 5, 2**40 + 1, 9], np.uint64), (7, 5, 6), p=[0.4, 0.3, 0.2, 0.1])
    start = (32, 0, 64)
    counted = census.block_census(core, start)
    assert set(counted) == {int(i) for i in np.unique(core) if i}
    for segment, (voxels, (low, high)) in counted.items():
        where = np.argwhere(core == segment)
        assert voxels == len(where)
        assert low == tuple((where.min(axis=0) + start).tolist())
        assert high == tuple((where.max(axis=0) + 1 + start).tolist())
    joined = census.joined(
        [
            counted[5],
            census.block_census(np.full((2, 2, 2), 5, np.uint64), (100, 100, 100))[5],
            (0, census.NO_BOX),
        ]
    )
    assert joined[0] == counted[5][0] + 8 and joined[1][1] == (102, 102, 102)


def test_a_census_table_reads_back_and_refuses_what_is_not_one() -> None:
    rows = [(2**64 - 1, 3, ((0, 1, 2), (3, 4, 5))), (7, 1, ((9, 9, 9), (10, 10, 10)))]
    table = census.decode(census.encode(rows))
    assert table["segment"].tolist() == [2**64 - 1, 7]
    assert table["voxels"].tolist() == [3, 1]
    assert table["low"].tolist() == [[0, 1, 2], [9, 9, 9]]
    assert table["high"].tolist() == [[3, 4, 5], [10, 10, 10]]
    with pytest.raises(MeshFormatError, match="not a census table"):
        census.decode(census.encode(rows)[:-1])
