"""Scatter with lifted strides (the GPU engine's first step) on numpy: every chunk's bytes
equal what the CPU codecs produce, and scatter + aggregate reproduce the CPU engine's shard."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.codecs import chunk_encoding
from shardwright.codecs.raw import RawEncoding
from shardwright.engine.aggregate import EncodedChunks, arrange_precomputed, arrange_zarr3
from shardwright.engine.blocks import block_cells, cut_cells
from shardwright.engine.scatter import scatter_precomputed, scatter_zarr3
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.zarr3 import sharding as zarr3_sharding

dims = st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 12), st.integers(1, 2))
chunks = st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 6))


@given(dims, chunks, st.sampled_from(["uint8", "uint16", "uint64", "float32"]))
def test_precomputed_scatter_equals_raw_encoding_of_each_chunk(
    shape: tuple[int, ...], chunk: tuple[int, int, int], dtype: str
) -> None:
    rng = np.random.default_rng(sum(shape))
    block = (rng.random(shape) * 200).astype(dtype)
    buffer, offsets, sizes, coords = scatter_precomputed(np, block, chunk)
    raw = chunk_encoding("raw")
    assert len(coords) == int(np.prod([-(-n // c) for n, c in zip(shape[:3], chunk, strict=False)]))
    for (gx, gy, gz), start, size in zip(
        coords.tolist(), offsets.tolist(), sizes.tolist(), strict=False
    ):
        piece = block[
            gx * chunk[0] : (gx + 1) * chunk[0],
            gy * chunk[1] : (gy + 1) * chunk[1],
            gz * chunk[2] : (gz + 1) * chunk[2],
        ]
        assert buffer[start : start + size].tobytes() == raw.encode(piece)


@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.data())
def test_zarr3_scatter_equals_padded_c_order_chunks(shape: list[int], data: st.DataObject) -> None:
    chunk = tuple(data.draw(st.integers(1, n)) for n in shape)
    block = np.arange(int(np.prod(shape)), dtype=np.uint16).reshape(shape)
    buffer, coords = scatter_zarr3(np, block, chunk, fill_value=7)
    nbytes = int(np.prod(chunk)) * 2
    for k, cell in enumerate(coords.tolist()):
        want = np.full(chunk, 7, dtype=np.uint16)
        part = block[tuple(slice(g * c, (g + 1) * c) for g, c in zip(cell, chunk, strict=False))]
        want[tuple(slice(0, n) for n in part.shape)] = part
        assert buffer[k * nbytes : (k + 1) * nbytes].tobytes() == want.tobytes()


def test_raw_shard_through_scatter_and_aggregate_equals_the_cpu_builder() -> None:
    """The whole GPU raw path (scatter -> aggregate), run on numpy, against the CPU engine."""
    rng = np.random.default_rng(0)
    block = rng.integers(0, 255, (37, 29, 11, 1), dtype=np.uint8)
    chunk = (8, 8, 4)
    grid = tuple(-(-n // c) for n, c in zip(block.shape[:3], chunk, strict=False))
    spec = ShardingSpec(preshift_bits=3, minishard_bits=2, shard_bits=0)
    buffer, offsets, sizes, coords = scatter_precomputed(np, block, chunk)
    ids = compressed_morton_code(coords, grid)
    held = EncodedChunks(np, device_budget=1 << 30, host_budget=1 << 30)
    held.add(buffer, offsets, sizes)
    shard = arrange_precomputed(spec, ids, held, 0).to_bytes()
    builder = spec.builder(0)
    raw = chunk_encoding("raw")
    for (gx, gy, gz), chunk_id in zip(coords.tolist(), ids.tolist(), strict=False):
        piece = block[gx * 8 : (gx + 1) * 8, gy * 8 : (gy + 1) * 8, gz * 4 : (gz + 1) * 4]
        builder.add(chunk_id, raw.encode(piece))
    assert shard == builder.finish().to_bytes()


def test_zarr3_shard_through_scatter_and_aggregate_equals_encode_shard() -> None:
    block = np.random.default_rng(1).integers(0, 9, (10, 13, 7), dtype=np.uint32)
    chunk = (4, 4, 4)
    buffer, coords = scatter_zarr3(np, block, chunk)
    grid = [3, 4, 2]
    nbytes = 4 * 4 * 4 * 4
    sizes = np.full(len(coords), nbytes)
    offsets = np.arange(len(coords)) * nbytes
    positions = np.ravel_multi_index(coords.T, grid)
    held = EncodedChunks(np, device_budget=1 << 30, host_budget=1 << 30)
    held.add(buffer, offsets, sizes)
    shard = arrange_zarr3(grid, positions, held, "end").to_bytes()
    blobs = {
        tuple(c): buffer[k * nbytes : (k + 1) * nbytes].tobytes()
        for k, c in enumerate(coords.tolist())
    }
    assert shard == zarr3_sharding.encode_shard(blobs, grid, "end")


@given(dims, chunks, st.sampled_from(["uint8", "uint16", "uint64"]), st.integers(0, 3))
def test_block_cells_yield_every_chunk_in_grid_order_as_the_raw_encoding_views(
    shape: tuple[int, ...], chunk: tuple[int, int, int], dtype: str, origin: int
) -> None:
    """The CPU engine's chunks: x fastest over the block's grid (as the slicing it replaced),
    each equal to its slice of the block, and its raw bytes a view without a copy."""
    rng = np.random.default_rng(sum(shape))
    voxels = (rng.random(shape) * 200).astype(dtype)
    grid = [-(-n // c) for n, c in zip(shape[:3], chunk, strict=False)]
    start = (origin, 2 * origin, 3 * origin)
    stop = tuple(s + g for s, g in zip(start, grid, strict=True))
    cells = list(block_cells((start, stop, voxels), chunk))
    expected_order = [
        (start[0] + x, start[1] + y, start[2] + z)
        for z in range(grid[2])
        for y in range(grid[1])
        for x in range(grid[0])
    ]
    assert [coord for coord, _ in cells] == expected_order
    raw = RawEncoding()
    for (gx, gy, gz), cell in cells:
        lo = [(g - s) * c for g, s, c in zip((gx, gy, gz), start, chunk, strict=True)]
        piece = voxels[lo[0] : lo[0] + chunk[0], lo[1] : lo[1] + chunk[1], lo[2] : lo[2] + chunk[2]]
        assert np.array_equal(cell, piece)
        view = raw.encoded_view(cell)
        assert isinstance(view, memoryview) and view.readonly
        assert np.shares_memory(np.frombuffer(view, np.uint8), cell)
        assert bytes(view) == raw.encode(piece)


@given(dims, chunks, st.integers(0, 3))
def test_cut_cells_are_the_block_cells_one_at_a_time(
    shape: tuple[int, ...], chunk: tuple[int, int, int], origin: int
) -> None:
    """What the CPU engine hands encoders that take a chunk at a time (compressed_segmentation):
    the scattered cells' coordinates in their order and their voxels, edge chunks truncated,
    each a Fortran-ordered copy (never a view of the block) in one buffer reused; and cseg's
    bytes of each equal those of the scattered chunk."""
    rng = np.random.default_rng(sum(shape))
    voxels = (rng.random(shape) * 5).astype("uint32")
    grid = [-(-n // c) for n, c in zip(shape[:3], chunk, strict=False)]
    start = (origin, 2 * origin, 3 * origin)
    block = (start, tuple(s + g for s, g in zip(start, grid, strict=True)), voxels)
    scattered = list(block_cells(block, chunk))
    cseg = chunk_encoding("compressed_segmentation")
    kept = []  # every chunk held: a buffer made per chunk could not take a freed one's place
    cut = cut_cells(block, chunk)
    for (coord, a), (cut_coord, b) in zip(scattered, cut, strict=True):
        assert cut_coord == coord
        assert np.array_equal(a, b) and not np.shares_memory(b, voxels)
        if b.shape == tuple(chunk) + voxels.shape[3:]:
            assert b.flags.f_contiguous
        assert cseg.encode(b) == cseg.encode(np.asfortranarray(a))
        kept.append(b)
    assert all(np.shares_memory(b, kept[0]) for b in kept)  # one buffer, reused


def test_raw_encoded_view_copies_what_is_not_laid_out_as_stored() -> None:
    """A strided, writable or big-endian chunk is encoded (a copy), never aliased."""
    raw = RawEncoding()
    volume = np.arange(4 * 5 * 6, dtype="<u2").reshape(4, 5, 6, order="F")
    for chunk in (volume[1:3], volume.copy(order="F"), volume.astype(">u2", order="F")):
        chunk_copy = chunk.copy()
        out = raw.encoded_view(chunk)
        assert isinstance(out, bytes) and out == raw.encode(chunk_copy)
