"""Choosing how a volume is sharded, by encoded bytes, within the task's memory.

A few chunks are sampled and encoded to estimate the encoded/raw ratio. Precomputed volumes use
the identity hash with enough preshift + minishard bits that every shard is a spatial box of
chunks (2**a x 2**b x 2**c, the low bits of the compressed Morton code), so a shard task reads
one box; other sharding choices still work (their shards are "scattered"). Zarr3 shards are
boxes doubled axis by axis while they stay under the target size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shardwright.errors import NAMED, OptionError, within
from shardwright.formats.precomputed.morton import grid_bits, morton_bit_dims
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.zarr3.codecs import Compressor
from shardwright.options import ConvertOptions
from shardwright.planning import checks, pyramid
from shardwright.planning.pyramid import Triple
from shardwright.sources import Source, missing

# Index sizes readers fetch cheaply (ARCHITECTURE: minishard index <~ 32 KiB, shard index
# <~ 8 KiB): at most 2**10 chunks per minishard (24 KiB) and 2**9 minishards (8 KiB).
MAX_PRESHIFT = 10
MAX_MINISHARD = 9
SAMPLE_CHUNKS = 6


def choose_sharding(
    options: ConvertOptions,
    grid: tuple[int, ...],
    encoded_chunk: float,
    data_encoding: str,
    max_chunks: int | None = None,
    step: Triple = (1, 1, 1),
) -> tuple[ShardingSpec, bool, Triple]:
    """Sharding spec, whether shards are scattered, and the shard box in chunks.

    Pyramids pass `max_chunks` (what a task may hold) and `step` (box extents that keep
    downsampling blocks whole: the box grows until aligned, or spans the axis).
    """
    try:
        total = sum(grid_bits(grid))
    except ValueError as exc:
        raise within(exc) from exc
    dims = morton_bit_dims(grid)
    fit = int(math.floor(math.log2(max(options.target_shard_bytes / encoded_chunk, 1))))
    if max_chunks is not None:
        fit = min(fit, max(0, max_chunks.bit_length() - 1))
    parallel = total - math.ceil(math.log2(max(options.min_shards, 1)))
    p = max(0, min(fit, parallel, total, MAX_PRESHIFT + MAX_MINISHARD))
    while p < min(total, MAX_PRESHIFT + MAX_MINISHARD) and not pyramid.box_aligned(
        morton_box(dims, p, grid), grid, step
    ):
        p += 1
    preshift = min(MAX_PRESHIFT, p // 2)
    minishard = p - preshift
    if minishard > MAX_MINISHARD:
        minishard, preshift = MAX_MINISHARD, p - MAX_MINISHARD
    if options.preshift_bits is not None:
        preshift = options.preshift_bits
    if options.minishard_bits is not None:
        minishard = options.minishard_bits
    low = min(preshift + minishard, total) if min(preshift, minishard) >= 0 else 0
    shard_bits = options.shard_bits if options.shard_bits is not None else total - low
    hash_name = options.hash or "identity"
    spec = sharding_spec(preshift, hash_name, minishard, shard_bits, data_encoding)
    scattered = hash_name != "identity" or shard_bits < total - low
    return spec, scattered, morton_box(dims, low, grid)


def sharding_spec(
    preshift_bits: int, hash_name: str, minishard_bits: int, shard_bits: int, data_encoding: str
) -> ShardingSpec:
    """The spec we write (minishard indexes gzip-compressed), or the reason these bits are
    impossible, as a plan error."""
    try:
        return ShardingSpec(
            preshift_bits=preshift_bits,
            hash=hash_name,
            minishard_bits=minishard_bits,
            shard_bits=shard_bits,
            minishard_index_encoding="gzip",
            data_encoding=data_encoding,
        )
    except ValueError as exc:
        raise within(exc, "impossible sharding parameters: ") from exc


def morton_box(dims: list[int], low: int, grid: tuple[int, ...]) -> Triple:
    """The box of chunks sharing a compressed Morton code's bits above the lowest `low`."""
    box = [1, 1, 1]
    for dim in dims[:low]:
        box[dim] *= 2
    x, y, z = (min(b, g) for b, g in zip(box, grid, strict=True))
    return (x, y, z)


def zarr_box(
    options: ConvertOptions,
    grid: tuple[int, ...],
    encoded_chunk: float,
    max_chunks: int | None = None,
    step: Triple = (1, 1, 1),
) -> Triple:
    """Zarr3 shard shape in chunks: doubled axis by axis while shards stay under the target
    size (and `max_chunks`) and there are at least `min_shards`; then, for pyramids, grown
    until its extents keep downsampling blocks whole (multiples of `step`, or the axis)."""
    box_list = [1, 1, 1]
    grown = True
    while grown:
        grown = False
        for dim in (0, 1, 2):
            doubled = 2 * math.prod(box_list)
            shards_after = math.prod(
                math.ceil(g / (b * (2 if d == dim else 1)))
                for d, (g, b) in enumerate(zip(grid, box_list, strict=True))
            )
            if (
                box_list[dim] < grid[dim]
                and doubled * encoded_chunk <= options.target_shard_bytes
                and (max_chunks is None or doubled <= max_chunks)
                and shards_after >= options.min_shards
            ):
                box_list[dim] *= 2
                grown = True
    for dim in (0, 1, 2):
        if box_list[dim] % step[dim] and box_list[dim] < grid[dim]:
            box_list[dim] = min(grid[dim], math.lcm(box_list[dim], step[dim]))
    return (box_list[0], box_list[1], box_list[2])


def sample_cells(grid: list[int]) -> list[tuple[int, ...]]:
    """The chunk grid cells a plan samples: the corners, the centre, a few seeded others."""
    picks = {tuple(g // 2 for g in grid), (0, 0, 0), tuple(g - 1 for g in grid)}
    rng = np.random.default_rng(0)
    while len(picks) < min(SAMPLE_CHUNKS, math.prod(grid)):
        picks.add(tuple(int(rng.integers(0, g)) for g in grid))
    return sorted(picks)


def sample_ratio(
    src: Source,
    chunk: Triple,
    size: tuple[int, ...],
    encode: Callable[[np.ndarray], bytes],
) -> tuple[float, missing.Tally]:
    """Encoded/raw ratio over a few chunks spread through the volume (corners and centre),
    and the source chunks those reads found absent.

    The samples are read and encoded concurrently: remote reads overlap instead of queueing,
    and the codecs, which release the GIL, share the cores.
    """
    picks = sample_cells([math.ceil(s / c) for s, c in zip(size, chunk, strict=True)])

    def sample(cell: tuple[int, ...]) -> tuple[int, int]:
        start = pyramid.triple(g * c for g, c in zip(cell, chunk, strict=True))
        stop = pyramid.triple(min(a + c, s) for a, c, s in zip(start, chunk, size, strict=True))
        block = src.read(start, stop)
        return block.nbytes, len(encode(block))

    with missing.counting() as absent, ThreadPoolExecutor(max_workers=len(picks)) as pool:
        sizes = list(pool.map(missing.in_context(sample), picks))
    raw = sum(r for r, _ in sizes)
    encoded = sum(e for _, e in sizes)
    return max(encoded / max(raw, 1), 1e-3), absent


def scale_key(options: ConvertOptions, resolution: tuple[float, ...]) -> str:
    """The precomputed scale's key: the one asked for, or the resolution (`8_8_40`)."""
    if options.scale_key is not None:
        checks.check_scale_key(options.scale_key)
        return options.scale_key
    return pyramid.scale_key(resolution)


def zarr_compressor(compression: str, level: int | None) -> Compressor | None:
    """The zarr3 inner-chunk compressor of `--compression` at its level (or the default)."""
    if compression == "none":
        return None
    try:
        return Compressor.of(compression, level)
    except ValueError as exc:
        raise OptionError(
            f"bad {{compression_level}} for {compression}: {exc}", compression_level=NAMED
        ) from exc
