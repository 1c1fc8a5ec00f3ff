"""Values no conversion can honour, refused while planning with the value and the reason, and
the values just inside each limit accepted."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from shardwright.common.control_keys import CONTROL_PREFIX, MANIFEST_KEY
from shardwright.errors import OptionError, PlanError
from shardwright.options import ConvertOptions
from shardwright.planning import checks
from shardwright.planning.formats import check_options_for_format
from shardwright.sources.missing import Tally


def test_a_zero_length_axis_is_refused_naming_the_source() -> None:
    checks.check_size((1, 1, 1), "a.npy")
    with pytest.raises(PlanError, match=r"a\.npy has a zero-length axis \(size x,y,z = 4,0,2\)"):
        checks.check_size((4, 0, 2), "a.npy")


def test_a_source_with_no_sampled_chunk_stored_is_refused_unless_filled() -> None:
    absent = Tally(looked_at=4, missing=4, examples=["0-8_0-8_0-8", "b", "c", "d"])
    with pytest.raises(PlanError) as refused:
        checks.check_sampled_missing("gs://b/v", absent, fill_missing=False)
    text = str(refused.value)
    assert "no data at gs://b/v: none of the 4 source chunks sampled is stored" in text
    assert "(e.g. 0-8_0-8_0-8, b, c)" in text and "fill_missing=True" in text
    checks.check_sampled_missing("gs://b/v", absent, fill_missing=True)
    checks.check_sampled_missing("gs://b/v", Tally(looked_at=4, missing=3), fill_missing=False)
    checks.check_sampled_missing("gs://b/v", Tally(), fill_missing=False)  # nothing looked at


@pytest.mark.parametrize(
    "resolution", [(0, 1, 1), (1, -2, 1), (1, 1, float("nan")), (float("inf"), 1, 1), (1, 1)]
)
def test_a_resolution_must_be_three_finite_positive_numbers(resolution: tuple) -> None:
    with pytest.raises(PlanError, match="resolution must be three finite positive numbers"):
        checks.check_resolution(resolution)


def test_a_fine_resolution_passes() -> None:
    checks.check_resolution((4, 4, 40))
    checks.check_resolution((1e-3, 0.5, 1e9))


def test_every_voxel_coordinate_must_fit_a_signed_64_bit_integer() -> None:
    top, bottom = 2**63 - 1, -(2**63)
    checks.check_voxel_offset((top - 9, 0, bottom), (10, 5, 5))  # last x is exactly 2**63 - 1
    with pytest.raises(PlanError, match=rf"the x coordinates {top - 8} \.\. {top + 1} do not fit"):
        checks.check_voxel_offset((top - 8, 0, 0), (10, 5, 5))
    with pytest.raises(PlanError, match=r"the z coordinates"):
        checks.check_voxel_offset((0, 0, bottom - 1), (10, 5, 5))
    with pytest.raises(PlanError, match="voxel offset must be three integers x,y,z, got 1,2"):
        checks.check_voxel_offset((1, 2), (10, 5, 5))


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("a/b", "no path separators"),
        ("a\\b", "no path separators"),
        (".", "no path separators"),
        ("..", "no path separators"),
        (".hidden", "not starting with '.'"),
        ("info", "one of the dataset's own objects"),
        ("zarr.json", "one of the dataset's own objects"),
        (MANIFEST_KEY, "one of the dataset's own objects"),
        (CONTROL_PREFIX.rstrip("/"), "not starting with '.'"),  # the job's own prefix
    ],
)
def test_a_scale_key_that_would_not_be_one_directory_of_its_own_is_refused(
    key: str, why: str
) -> None:
    with pytest.raises(PlanError, match=re.escape(f"scale key {key!r}")) as refused:
        checks.check_scale_key(key)
    assert why in str(refused.value)


def test_ordinary_scale_keys_pass() -> None:
    for key in ("8_8_40", "s0", "4.5_4.5_40", "mip-1"):
        checks.check_scale_key(key)


def test_a_segmentation_holds_integers_only() -> None:
    for dtype in ("float32", "float64", "complex64", "bool"):
        with pytest.raises(PlanError, match="cannot be a segmentation"):
            checks.check_layer_dtype("segmentation", np.dtype(dtype))
    for dtype in ("uint8", "int16", "uint64"):
        checks.check_layer_dtype("segmentation", np.dtype(dtype))
    checks.check_layer_dtype("image", np.dtype("float32"))


def test_a_block_size_goes_with_compressed_segmentation_only() -> None:
    options = ConvertOptions(compressed_segmentation_block_size=(4, 4, 4))
    checks.check_block_size(options, None)  # not decided yet
    checks.check_block_size(options, "compressed_segmentation")
    with pytest.raises(OptionError) as refused:
        checks.check_block_size(options, "raw")
    assert str(refused.value) == (
        "compressed_segmentation_block_size applies to encoding='compressed_segmentation', not raw"
    )
    checks.check_block_size(ConvertOptions(), "raw")


IGNORED: list[tuple[dict[str, Any], str]] = [
    ({"format": "zarr3", "scale_key": "s0"}, "scale_key applies to precomputed output"),
    ({"format": "zarr3", "hash": "identity"}, "hash applies to precomputed output"),
    ({"format": "zarr3", "jpeg_quality": 90}, "jpeg_quality applies to precomputed output"),
    ({"format": "zarr3", "shard_bits": 2}, "shard_bits applies to precomputed output"),
    ({"format": "zarr3", "zarr_layout": "array", "mips": 2}, "writes one bare array; a pyramid"),
    ({"shard_shape": (64, 64, 64)}, "shard_shape applies to zarr3 output"),
    ({"index_location": "start"}, "index_location applies to zarr3 output"),
    ({"zarr_layout": "ome"}, "zarr_layout applies to zarr3 output"),
    ({"jpeg_quality": 90}, "jpeg_quality applies to encoding='jpeg', not the default"),
    ({"jpeg_quality": 90, "encoding": "png"}, "jpeg_quality applies to encoding='jpeg', not png"),
    ({"encoding": "raw", "compressed_segmentation_block_size": (8, 8, 8)}, "applies to encoding"),
    ({"compression": "none", "compression_level": 3}, "compression_level applies to gzip, zstd"),
    ({"encoding": "jpeg", "compression_level": 3}, "jpeg chunks are not compressed again"),
    ({"encoding": "png", "compression_level": 3}, "png compresses itself"),
]


@pytest.mark.parametrize(("values", "message"), IGNORED, ids=[m for _, m in IGNORED])
def test_options_the_format_would_ignore_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError) as refused:
        check_options_for_format(ConvertOptions(**values))
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "values",
    [
        {"format": "zarr3", "shard_shape": (64, 64, 64), "compression": "zstd",
         "compression_level": 5},
        {"encoding": "jpeg", "jpeg_quality": 70},
        {"encoding": "jpeg", "compression": "gzip", "compression_level": 3},
        {"encoding": "compressed_segmentation", "compressed_segmentation_block_size": (4, 4, 4)},
        {"format": "zarr3", "zarr_layout": "array"},
    ],
)  # fmt: skip
def test_options_the_format_honours_pass(values: dict[str, Any]) -> None:
    check_options_for_format(ConvertOptions(**values))
