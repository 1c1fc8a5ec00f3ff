"""The precomputed layout: box shard keys and hashed shards' chunks against CloudVolume's own
sharding arithmetic (Morton code, shard location, file name), the byte stage, the report rows,
and the refusals of what precomputed output cannot hold."""

from __future__ import annotations

import gzip
from typing import Any

import numpy as np
import pytest
from cloudvolume.datasource.precomputed.common import compressed_morton_code as cv_morton
from cloudvolume.datasource.precomputed.sharding import ShardingSpecification
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright import api
from shardwright.errors import OptionError, PlanError
from shardwright.formats.precomputed.layout import PrecomputedLayout
from shardwright.planning import ConversionPlan

Triple = tuple[int, int, int]


def _plan(size: Triple, chunk: Triple, dtype: str = "uint8", **options: Any) -> ConversionPlan:
    volume: Any = np.zeros(size[::-1], dtype)
    plan = api.plan(volume, "/nowhere", chunk_size=chunk, resolution=(4, 4, 40), **options)
    assert isinstance(plan, ConversionPlan)
    return plan


def _layout(plan: ConversionPlan) -> PrecomputedLayout:
    assert isinstance(plan.layout, PrecomputedLayout)
    return plan.layout


def _cloudvolume_spec(layout: PrecomputedLayout) -> ShardingSpecification:
    return ShardingSpecification.from_dict(layout.sharding.to_json())


def _cells(grid: Triple) -> np.ndarray:
    return np.array([(x, y, z) for z in range(grid[2]) for y in range(grid[1])
                     for x in range(grid[0])])  # fmt: skip


@settings(max_examples=25)
@given(
    size=st.tuples(*[st.integers(1, 60)] * 3),
    chunk=st.tuples(*[st.integers(2, 16)] * 3),
    bits=st.tuples(st.integers(0, 4), st.integers(0, 3)),
)
def test_box_shard_keys_are_where_cloudvolume_looks_for_each_chunk(
    size: Triple, chunk: Triple, bits: tuple[int, int]
) -> None:
    chunk = tuple(min(c, s) for c, s in zip(chunk, size, strict=True))  # type: ignore[assignment]
    plan = _plan(size, chunk, preshift_bits=bits[0], minishard_bits=bits[1], compression="none")
    layout = _layout(plan)
    reader = _cloudvolume_spec(layout)
    for task in plan.shards():
        start, stop = np.array(task.chunk_start), np.array(task.chunk_stop)
        cells = np.stack(np.meshgrid(*(np.arange(a, b) for a, b in zip(start, stop, strict=True)),
                                     indexing="ij"), -1).reshape(-1, 3)  # fmt: skip
        for code in cv_morton(cells, plan.grid_shape).tolist():
            location = reader.compute_shard_location(code)
            assert task.key == f"4_4_40/{location.shard_number}.shard"
            assert task.shard_number == int(location.shard_number, 16)


@settings(max_examples=15)
@given(size=st.tuples(*[st.integers(1, 40)] * 3), bits=st.tuples(*[st.integers(0, 3)] * 3))
def test_hashed_shards_hold_each_chunk_where_cloudvolume_hashes_it(
    size: Triple, bits: Triple
) -> None:
    plan = _plan(size, (8, 8, 8) if min(size) >= 8 else tuple(min(8, s) for s in size),  # type: ignore[arg-type]
                 hash="murmurhash3_x86_128", preshift_bits=bits[0], minishard_bits=bits[1],
                 shard_bits=bits[2])  # fmt: skip
    assert plan.scattered
    reader = _cloudvolume_spec(_layout(plan))
    cells = _cells(plan.grid_shape)
    want = {}
    for cell, code in zip(cells.tolist(), cv_morton(cells, plan.grid_shape).tolist(), strict=True):
        want[tuple(cell)] = f"4_4_40/{reader.compute_shard_location(code).shard_number}.shard"
    got = {}
    tasks = list(plan.shards())
    assert plan.shard_count == len(tasks) == len(set(want.values()))
    for task in tasks:
        assert task.scattered and (task.chunk_start, task.chunk_stop) == (
            (0, 0, 0),
            plan.grid_shape,
        )
        for cell in plan.scattered_chunk_coords(task.shard_number).tolist():  # type: ignore[arg-type]
            assert tuple(cell) not in got, "a chunk in two shards"
            got[tuple(cell)] = task.key
    assert got == want
    assert plan.describe()["minishard_index_bytes"] is None


def test_shard_file_names_are_zero_padded_hex() -> None:
    plan = _plan((512, 256, 64), (32, 32, 32), compression="none", min_shards=64)
    layout = _layout(plan)
    spec = layout.sharding
    keys, numbers = layout.box_shard_keys(
        np.array([[0, 0, 0], [15, 7, 1]]), (1, 1, 1), plan.grid_shape
    )
    width = max(1, -(-spec.shard_bits // 4))
    assert keys == [f"4_4_40/{n:0{width}x}.shard" for n in numbers]
    assert numbers[0] == 0 and numbers[1] is not None and numbers[1] > 0


def test_the_byte_stage_is_the_shards_data_encoding() -> None:
    gzipped = _plan((16, 16, 16), (8, 8, 8), compression="gzip", compression_level=2)
    stage = gzipped.byte_stage
    assert (stage.codec, stage.level, stage.checksum) == ("gzip", 2, False)
    assert stage.host is not None and gzip.decompress(stage.host(b"abc" * 100)) == b"abc" * 100
    raw = _plan((16, 16, 16), (8, 8, 8), compression="none").byte_stage
    assert (raw.codec, raw.level, raw.checksum, raw.host) == (None, None, False, None)


def test_jpeg_and_png_are_not_gzipped_again_by_default() -> None:
    for encoding in ("jpeg", "png"):
        layout = _layout(_plan((16, 16, 16), (8, 8, 8), encoding=encoding))
        assert layout.sharding.data_encoding == "raw"
        assert layout.encodes_jpeg is (encoding == "jpeg")


def test_the_report_rows_and_the_companions_named() -> None:
    plan = _plan((64, 64, 64), (16, 16, 16), preshift_bits=3, minishard_bits=2)
    described = _layout(plan).describe(plan)
    assert described["scale_key"] == "4_4_40" and described["encoding"] == "raw"
    assert described["shard_index_bytes"] == 16 * 2**2
    assert described["minishard_index_bytes"] == 24 * 2**3
    named = _layout(plan).naming({"mesh": "mesh"})
    assert named.info.to_json()["mesh"] == "mesh" and "mesh" not in _layout(plan).info.to_json()


def test_what_precomputed_output_cannot_hold_is_refused() -> None:
    with pytest.raises(PlanError, match="precomputed output cannot hold float64 voxels"):
        _plan((16, 16, 16), (8, 8, 8), "float64")
    with pytest.raises(
        OptionError, match="precomputed supports compression none or gzip, not 'zstd'"
    ):
        _plan((16, 16, 16), (8, 8, 8), compression="zstd")
    with pytest.raises(PlanError, match="pyramids need spatial-box shards .* drop shard_bits"):
        _plan((16, 16, 16), (8, 8, 8), mips=1, preshift_bits=0, minishard_bits=0, shard_bits=1)
    with pytest.raises(PlanError, match="pyramid level 0: shards of 1 x 1 x 1 chunks would split"):
        _plan((18, 18, 18), (3, 3, 3), mips=1, preshift_bits=0, minishard_bits=0)
