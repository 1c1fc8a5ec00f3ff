"""Where two block groups meet: a block's read box is its own group's part and the parts
that lie in the next groups' blocks, each inside a face that block hands over; a face object
proves itself or is not taken."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.generation import faces
from shardwright.generation.grid import BlockGrid

Triple = tuple[int, int, int]


def _grid(shape: Triple, block: Triple, factor: Triple, group: Triple) -> BlockGrid:
    return BlockGrid(shape, block, (4.0, 4.0, 40.0), factor, (2.0, 2.0, 20.0), group)


@given(
    shape=st.tuples(*[st.integers(1, 24)] * 3),
    block=st.tuples(*[st.integers(1, 8)] * 3),
    factor=st.tuples(*[st.integers(1, 3)] * 3),
    group=st.tuples(*[st.integers(1, 3)] * 3),
    trim=st.tuples(*[st.integers(0, 2)] * 3),
)
def test_own_box_and_parts_tile_a_blocks_read_box_once_each_inside_a_handed_face(
    shape: Triple, block: Triple, factor: Triple, group: Triple, trim: Triple
) -> None:
    grid = _grid(shape, block, factor, group)
    # the base may end inside the level's last voxel (a level rounds up)
    limit = tuple(
        max(1, s * f - min(t, f - 1)) for s, f, t in zip(shape, factor, trim, strict=True)
    )
    handed = {
        (p, axis): box for p in grid.positions() for axis, box in faces.published(grid, p, limit)
    }
    for position in grid.positions():
        (start, stop) = faces.read_box(grid, position, limit)
        covered = np.zeros([b - a for a, b in zip(start, stop, strict=True)], np.int32)

        def mark(box: faces.Box, covered: np.ndarray = covered, start: Triple = start) -> None:
            covered[tuple(slice(a - s, b - s) for a, b, s in zip(*box, start, strict=True))] += 1

        own = faces.own_box(grid, position, limit)
        mark(own)
        group_box = grid.base_box(*grid.group_core(grid.group_of(position)), limit)
        assert all(g0 <= a and b <= g1 for a, b, g0, g1 in zip(*own, *group_box, strict=True))
        for part in faces.parts(grid, position, limit):
            mark(part.box)
            assert grid.group_of(part.owner) != grid.group_of(position)
            face = handed[(part.owner, part.axis)]
            assert face == faces.face_box(grid, part.owner, part.axis, limit)
            assert all(f0 <= a and b <= f1 for a, b, f0, f1 in zip(*part.box, *face, strict=True))
        assert (covered == 1).all()


def test_a_face_object_proves_itself_or_is_not_taken() -> None:
    box = ((4, 0, 8), (5, 6, 10))
    voxels = np.asfortranarray(np.arange(12, dtype=np.uint64).reshape(1, 6, 2, 1) * 2**40)
    data = faces.encode(voxels, box)
    got = faces.decode(data, box, np.dtype(np.uint64), 1)
    assert got is not None and np.array_equal(got, voxels)
    assert faces.decode(data, ((4, 0, 8), (5, 6, 9)), np.dtype(np.uint64), 1) is None
    assert faces.decode(data, box, np.dtype(np.uint32), 1) is None
    assert faces.decode(data, box, np.dtype(np.uint64), 2) is None
    assert faces.decode(data[:-3], box, np.dtype(np.uint64), 1) is None  # torn
    header = len(data) - len(data.split(b"}", 1)[1])
    changed = bytearray(data)
    changed[header - 40] ^= 1  # inside the header: not the face it says
    assert faces.decode(bytes(changed), box, np.dtype(np.uint64), 1) is None
    other = faces.encode(voxels + 1, box)
    crc_swapped = other[: len(faces.MAGIC) + 4] + data[len(faces.MAGIC) + 4 : len(faces.MAGIC) + 8]
    assert faces.decode(crc_swapped + other[len(faces.MAGIC) + 8 :], box,
                        np.dtype(np.uint64), 1) is None  # fmt: skip
    assert faces.decode(b"not a face", box, np.dtype(np.uint64), 1) is None
    assert faces.face_name((2, 0, 1), 0) == "x-2_0_1"
