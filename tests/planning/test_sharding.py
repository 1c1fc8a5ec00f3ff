"""Choosing a volume's sharding: Morton boxes against CloudVolume's own shard-shape and Morton
code arithmetic, the identity-hash choice's invariants (every chunk in exactly one box shard,
numbers within the spec, small indexes, aligned boxes), zarr3 shard boxes grown to a fixed
point, the sampled chunks, scale keys and compressors, and the refusals."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from cloudvolume.datasource.precomputed.common import compressed_morton_code as cv_morton
from cloudvolume.datasource.precomputed.sharding import image_shard_shape_from_spec
from hypothesis import given
from hypothesis import strategies as st

from shardwright.errors import OptionError, PlanError, ShardwrightError
from shardwright.formats.precomputed.morton import grid_bits, morton_bit_dims
from shardwright.options import ConvertOptions
from shardwright.planning import sharding
from shardwright.planning.sharding import MAX_MINISHARD, MAX_PRESHIFT

Triple = tuple[int, int, int]
grids = st.tuples(*[st.integers(1, 20)] * 3)


@given(grid=grids, chunk=st.tuples(*[st.integers(1, 64)] * 3), data=st.data())
def test_a_morton_box_is_cloudvolumes_shard_shape(
    grid: Triple, chunk: Triple, data: st.DataObject
) -> None:
    low = data.draw(st.integers(0, sum(grid_bits(grid))))
    box = sharding.morton_box(morton_bit_dims(grid), low, grid)
    spec = {"preshift_bits": low, "minishard_bits": 0}
    size = [g * c for g, c in zip(grid, chunk, strict=True)]
    voxels = image_shard_shape_from_spec(spec, size, chunk)
    assert box == tuple(min(int(v) // c, g) for v, c, g in zip(voxels, chunk, grid, strict=True))


def _shards_by_code(grid: Triple, low: int) -> dict[int, list[Triple]]:
    """Every chunk of the grid grouped by its CloudVolume Morton code's bits above `low`."""
    cells = np.array([(x, y, z) for x in range(grid[0]) for y in range(grid[1])
                      for z in range(grid[2])])  # fmt: skip
    codes = cv_morton(cells, grid) if cells.size else np.zeros(0, np.uint64)
    groups: dict[int, list[Triple]] = defaultdict(list)
    for cell, code in zip(cells.tolist(), codes.tolist(), strict=True):
        groups[int(code) >> low].append(tuple(cell))
    return groups


@given(
    grid=grids,
    encoded=st.floats(1, 10**6),
    target=st.integers(1, 10**9),
    min_shards=st.integers(1, 64),
    step=st.tuples(*[st.sampled_from([1, 2])] * 3),
)
def test_identity_sharding_makes_every_shard_one_aligned_box(
    grid: Triple, encoded: float, target: int, min_shards: int, step: Triple
) -> None:
    options = ConvertOptions(target_shard_bytes=target, min_shards=min_shards)
    spec, scattered, box = sharding.choose_sharding(options, grid, encoded, "gzip", step=step)
    total = sum(grid_bits(grid))
    low = spec.preshift_bits + spec.minishard_bits
    assert not scattered and spec.hash == "identity" and spec.data_encoding == "gzip"
    assert spec.minishard_index_encoding == "gzip"
    assert spec.preshift_bits <= MAX_PRESHIFT and spec.minishard_bits <= MAX_MINISHARD
    assert low + spec.shard_bits == total  # every code's high bits name a shard of the spec
    assert all(b % s == 0 or b >= g for b, s, g in zip(box, step, grid, strict=True))
    if step == (1, 1, 1) and box != (1, 1, 1):  # grown only while it fits the target
        assert math.prod(box) * encoded <= target
    groups = _shards_by_code(grid, low)
    assert sum(len(cells) for cells in groups.values()) == math.prod(grid)
    for number, cells in groups.items():
        assert number < spec.num_shards
        first = tuple(c // b * b for c, b in zip(cells[0], box, strict=True))
        stop = tuple(min(f + b, g) for f, b, g in zip(first, box, grid, strict=True))
        assert sorted(cells) == sorted(
            (x, y, z) for x in range(first[0], stop[0]) for y in range(first[1], stop[1])
            for z in range(first[2], stop[2])
        ), f"shard {number} is not the box {first} .. {stop}"  # fmt: skip


def test_identity_sharding_by_hand() -> None:
    # 8 x 8 x 8 chunks of 1 KiB, 64 KiB shards: 2**6 chunks a shard, a 4 x 4 x 4 box, split
    # 3 preshift / 3 minishard; 9 Morton bits in all leave 3 shard bits.
    options = ConvertOptions(target_shard_bytes=64 * 1024, min_shards=1)
    spec, scattered, box = sharding.choose_sharding(options, (8, 8, 8), 1024.0, "raw")
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (3, 3, 3)
    assert box == (4, 4, 4) and not scattered
    # Sixteen shards at least (the default): 4 shard bits, 5 below them, x y z x y.
    more = ConvertOptions(target_shard_bytes=64 * 1024)
    spec, _, smaller = sharding.choose_sharding(more, (8, 8, 8), 1024.0, "raw")
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (2, 3, 4)
    assert smaller == (4, 4, 2)
    # Pyramids cap the chunks a shard may hold: 9 chunks allow 2**3.
    _, _, capped = sharding.choose_sharding(options, (8, 8, 8), 1024.0, "raw", max_chunks=9)
    assert capped == (2, 2, 2)


def test_sharding_options_given_are_kept_and_hashes_or_fewer_shard_bits_scatter() -> None:
    given_bits = ConvertOptions(preshift_bits=1, minishard_bits=2)
    spec, scattered, box = sharding.choose_sharding(given_bits, (8, 8, 8), 1.0, "raw")
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (1, 2, 6)
    assert box == (2, 2, 2) and not scattered
    hashed = ConvertOptions(hash="murmurhash3_x86_128")
    spec, scattered, _ = sharding.choose_sharding(hashed, (8, 8, 8), 1.0, "raw")
    assert scattered and spec.hash == "murmurhash3_x86_128"
    fewer = ConvertOptions(preshift_bits=1, minishard_bits=2, shard_bits=3)
    spec, scattered, _ = sharding.choose_sharding(fewer, (8, 8, 8), 1.0, "raw")
    assert scattered and spec.shard_bits == 3


def test_impossible_sharding_bits_are_refused_with_the_reason() -> None:
    options = ConvertOptions(preshift_bits=60, minishard_bits=9)
    with pytest.raises(ShardwrightError, match="impossible sharding parameters: .* must be <= 64"):
        sharding.choose_sharding(options, (8, 8, 8), 1.0, "raw")
    with pytest.raises(ValueError, match="impossible sharding parameters: sharding hash"):
        sharding.sharding_spec(0, "sha1", 0, 0, "raw")
    with pytest.raises(ShardwrightError, match="at most 64"):
        sharding.choose_sharding(ConvertOptions(), (2**22, 2**22, 2**22), 1.0, "raw")


# -- zarr3 boxes ----------------------------------------------------------------------------------
def _can_double(
    box: Triple, dim: int, grid: Triple, encoded: float, options: ConvertOptions, most: int | None
) -> bool:
    doubled = [b * (2 if d == dim else 1) for d, b in enumerate(box)]
    shards = math.prod(math.ceil(g / b) for g, b in zip(grid, doubled, strict=True))
    return (
        box[dim] < grid[dim]
        and math.prod(doubled) * encoded <= options.target_shard_bytes
        and (most is None or math.prod(doubled) <= most)
        and shards >= options.min_shards
    )


@given(
    grid=grids,
    encoded=st.floats(1, 10**5),
    target=st.integers(1, 10**8),
    min_shards=st.integers(1, 200),
    most=st.none() | st.integers(1, 5000),
    step=st.tuples(*[st.sampled_from([1, 2, 3])] * 3),
)
def test_a_zarr3_box_is_doubled_until_no_axis_can_grow_then_aligned(
    grid: Triple, encoded: float, target: int, min_shards: int, most: int | None, step: Triple
) -> None:
    options = ConvertOptions(target_shard_bytes=target, min_shards=min_shards)
    grown = sharding.zarr_box(options, grid, encoded, most)
    assert all(b > 0 and b & (b - 1) == 0 for b in grown)  # powers of two before alignment
    assert not any(_can_double(grown, d, grid, encoded, options, most) for d in range(3))
    if grown != (1, 1, 1):
        assert math.prod(grown) * encoded <= target
        assert most is None or math.prod(grown) <= most
    aligned = sharding.zarr_box(options, grid, encoded, most, step)
    for a, b, s, g in zip(aligned, grown, step, grid, strict=True):
        assert a % s == 0 or a == g or (a == b and b >= g)
        assert a >= b


def test_a_zarr3_box_by_hand() -> None:
    options = ConvertOptions(target_shard_bytes=8 * 100)
    assert sharding.zarr_box(options, (16, 16, 16), 100.0) == (2, 2, 2)  # x, y, z in turn
    assert sharding.zarr_box(options, (1, 16, 16), 100.0) == (1, 4, 2)  # x cannot grow
    assert sharding.zarr_box(options, (16, 16, 16), 100.0, step=(3, 1, 1)) == (6, 2, 2)
    assert sharding.zarr_box(options, (5, 16, 16), 100.0, step=(3, 1, 1)) == (5, 2, 2)


# -- sampling, keys, compressors ---------------------------------------------------------------
@given(grid=st.lists(st.integers(1, 50), min_size=3, max_size=3))
def test_the_sampled_cells_are_the_corners_the_centre_and_a_few_more(grid: list[int]) -> None:
    cells = sharding.sample_cells(grid)
    assert cells == sorted(set(cells)) == sharding.sample_cells(grid)  # distinct, fixed
    assert len(cells) == min(sharding.SAMPLE_CHUNKS, math.prod(grid))
    assert (0, 0, 0) in cells and tuple(g - 1 for g in grid) in cells
    assert tuple(g // 2 for g in grid) in cells
    assert all(0 <= c < g for cell in cells for c, g in zip(cell, grid, strict=True))


def test_a_scale_key_is_the_one_asked_for_or_the_resolution() -> None:
    assert sharding.scale_key(ConvertOptions(), (8, 8, 40)) == "8_8_40"
    assert sharding.scale_key(ConvertOptions(scale_key="s0"), (8, 8, 40)) == "s0"
    with pytest.raises(PlanError, match="must name one directory"):
        sharding.scale_key(ConvertOptions(scale_key="a/b"), (8, 8, 40))


def test_zarr3_compressors_and_their_default_levels() -> None:
    assert sharding.zarr_compressor("none", None) is None
    chosen = {name: sharding.zarr_compressor(name, None) for name in ("gzip", "zstd", "blosc")}
    assert {n: (c.name, c.level) for n, c in chosen.items() if c} == {
        "gzip": ("gzip", 6), "zstd": ("zstd", 3), "blosc": ("blosc", 5),
    }  # fmt: skip
    level = sharding.zarr_compressor("zstd", 19)
    assert level is not None and level.level == 19
    with pytest.raises(OptionError, match=r"bad compression_level for gzip: .*in 0\.\.9"):
        sharding.zarr_compressor("gzip", 12)
