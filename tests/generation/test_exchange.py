"""The block spool: pieces of random sizes written section by section read back bit for bit
through the index and trailer, the index's ranges contiguous in (output, shard) order, and
the coordinator's table in block order whatever order blocks finish in."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.errors import MeshFormatError
from shardwright.generation import exchange
from shardwright.generation.exchange import MESH, SKELETON, BlockIndex, Exchange, Mask, Piece


@st.composite
def pieces(draw: st.DrawFn, output: int) -> Piece:
    n = draw(st.integers(0, 6))
    m = draw(st.integers(0, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    width = 3 if output == MESH else 2
    box = (tuple(draw(st.tuples(*[st.integers(0, 2**32 - 1)] * 3))),) * 2
    mask = None
    if output == SKELETON and draw(st.booleans()):  # a segment handed over as its voxels
        shape = tuple(int(v) for v in rng.integers(1, 9, 3))
        mask = Mask.of(rng.random(shape) < 0.4, tuple(int(v) for v in rng.integers(0, 2**20, 3)))
    return Piece(
        segment=draw(st.integers(0, 2**64 - 1)),
        voxels=draw(st.integers(0, 2**64 - 1)),
        block=draw(st.tuples(*[st.integers(0, 2**32 - 1)] * 3)),
        vertices=rng.normal(0, 1e4, (n, 3)).astype(np.float32),
        links=rng.integers(0, 2**32, (m, width)).astype(np.uint32),
        radii=rng.random(n).astype(np.float32) if output == SKELETON else None,
        box=box,
        mask=mask,
        traced=output == MESH or mask is None or draw(st.booleans()),  # a part left untraced
    )


@given(
    sections=st.dictionaries(
        st.tuples(st.sampled_from([MESH, SKELETON]), st.integers(0, 2**32 - 1)),
        st.integers(0, 3), min_size=1, max_size=5),
    data=st.data(),
)  # fmt: skip
def test_a_spool_reads_back_every_piece_of_every_section(
    sections: dict[tuple[int, int], int], data: st.DataObject
) -> None:
    made = {key: [data.draw(pieces(key[0])) for _ in range(n)] for key, n in sections.items()}
    parts, index = exchange.spool({k: [p.to_bytes() for p in v] for k, v in made.items()})
    blob = b"".join(parts)
    size = exchange.index_size(blob[-exchange.TRAILER :])
    parsed = exchange.parse_index(blob[-exchange.TRAILER - size : -exchange.TRAILER])
    assert parsed.tolist() == index.tolist()
    keys = [(int(r["output"]), int(r["shard"])) for r in parsed]
    assert keys == sorted(made)
    assert parsed["start"].tolist() == [0, *parsed["stop"].tolist()[:-1]]  # back to back
    assert int(parsed["stop"][-1]) == len(blob) - size - exchange.TRAILER
    for (output, shard), row in zip(keys, parsed, strict=True):
        got = list(exchange.read_pieces(blob[row["start"] : row["stop"]], output))
        want = made[(output, shard)]
        assert len(got) == len(want)
        for have, piece in zip(got, want, strict=True):
            assert (have.segment, have.voxels, have.block, have.box) == (
                piece.segment, piece.voxels, piece.block, piece.box)  # fmt: skip
            assert have.vertices.tobytes() == piece.vertices.tobytes()
            assert have.links.tobytes() == piece.links.tobytes()
            assert (have.radii is None) == (piece.radii is None)
            if piece.radii is not None and have.radii is not None:
                assert have.radii.tobytes() == piece.radii.tobytes()
            assert (have.mask is None) == (piece.mask is None) and have.traced == piece.traced
            if piece.mask is not None and have.mask is not None:
                assert (have.mask.low, have.mask.high) == (piece.mask.low, piece.mask.high)
                assert np.array_equal(have.mask.voxels(), piece.mask.voxels())


def test_a_truncated_section_or_a_foreign_object_is_refused() -> None:
    bone = Piece(3, 1, (0, 0, 0), np.ones((2, 3), np.float32), np.array([[0, 1]], np.uint32),
                 np.ones(2, np.float32))  # fmt: skip
    held = Mask.of(np.eye(3, dtype=bool)[:, :, None], (4, 5, 6))
    for piece in (bone, Piece(3, 1, (0, 0, 0), bone.vertices, bone.links, bone.radii, mask=held)):
        data = piece.to_bytes()
        for cut in (1, 4, len(data) - 1):
            with pytest.raises(MeshFormatError, match="truncated"):
                list(exchange.read_pieces(data[:cut], SKELETON))
    with pytest.raises(MeshFormatError, match="another shardwright version"):
        exchange.index_size(b"\0" * 8 + b"SWXCHG01")
    with pytest.raises(MeshFormatError, match="trailer is wrong"):
        exchange.index_size(b"\0" * 8 + b"NOTASPOO")
    with pytest.raises(MeshFormatError, match="trailer is wrong"):
        exchange.index_size(b"short")


def test_the_table_lists_ranges_in_block_order_whatever_order_blocks_finish_in() -> None:
    blocks = [f"{x}_{y}_0" for x in range(3) for y in range(2)]
    indexes = {
        key: np.array([(MESH, i % 3, 10 * i, 10 * i + 5), (SKELETON, 7, 0, i + 1)], exchange.ENTRY)
        for i, key in enumerate(blocks)
    }
    tables = []
    for seed in range(3):
        order = blocks[:]
        random.Random(seed).shuffle(order)
        table = Exchange()
        for key in order:
            table.add(BlockIndex(key, indexes[key]))
        tables.append(table)
    for table in tables:
        assert table.shards(MESH) == [0, 1, 2] and table.shards(SKELETON) == [7]
        by_key = sorted(enumerate(blocks), key=lambda p: p[1])
        assert table.ranges(SKELETON, 7) == tuple((key, 0, i + 1) for i, key in by_key)
        assert table.ranges(MESH, 1) == (("0_1_0", 10, 15), ("2_0_0", 40, 45))
        assert table.ranges(MESH, 9) == ()
