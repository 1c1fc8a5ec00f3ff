"""The zarr3 layout: shard keys from grid positions in the array's axis order, each level's
array and the OME-Zarr group's scales and voxel-centre translations, the byte stage, the
report rows, and the refusals of what zarr3 output does not do."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardwright import api
from shardwright.errors import OptionError, PlanError, ShardwrightWarning
from shardwright.formats.zarr3.layout import Zarr3Layout
from shardwright.planning import ConversionPlan

Triple = tuple[int, int, int]


def _plan(array: Any, **options: Any) -> ConversionPlan:
    values: dict[str, Any] = {"format": "zarr3", "resolution": (4, 4, 40)} | options
    plan = api.plan(array, "/nowhere", **values)
    assert isinstance(plan, ConversionPlan)
    return plan


def _layout(plan: ConversionPlan) -> Zarr3Layout:
    assert isinstance(plan.layout, Zarr3Layout)
    return plan.layout


def test_shard_keys_are_grid_positions_in_the_arrays_axis_order() -> None:
    channels = np.zeros((2, 8, 20, 40), np.uint16)  # c, z, y, x
    plan = _plan(channels, source_axes="czyx", chunk_size=(8, 8, 4), shard_shape=(16, 8, 4))
    layout = _layout(plan)
    assert layout.axes == "czyx" and layout.prefix == "0/"
    keys, numbers = layout.box_shard_keys(np.array([[0, 0, 0], [4, 1, 1], [2, 2, 0]]),
                                          (2, 1, 1), plan.grid_shape)  # fmt: skip
    assert keys == ["0/c/0/0/0/0", "0/c/0/1/1/2", "0/c/0/0/2/1"] and numbers == [None] * 3
    xyz = _plan(np.zeros((4, 8, 16), np.uint8).transpose(2, 1, 0), source_axes="xyz",
                chunk_size=(4, 4, 4), zarr_layout="array")  # fmt: skip
    layout = _layout(xyz)
    assert layout.axes == "xyz" and layout.prefix == ""
    keys, _ = layout.box_shard_keys(np.array([[3, 1, 0]]), (1, 1, 1), xyz.grid_shape)
    assert keys == ["c/3/1/0"]


def test_each_level_is_an_array_and_the_group_places_voxel_centres() -> None:
    plan = _plan(np.zeros((10, 20, 40), np.uint16), chunk_size=(8, 8, 4), voxel_offset=(2, 0, 1),
                 mips=1, factor=(2, 2, 1))  # fmt: skip
    docs = dict(plan.metadata_documents())
    assert list(docs) == ["0/zarr.json", "1/zarr.json", "zarr.json"]
    assert docs["0/zarr.json"]["shape"] == [10, 20, 40]  # z, y, x
    assert docs["1/zarr.json"]["shape"] == [10, 10, 20]
    (multiscale,) = docs["zarr.json"]["attributes"]["ome"]["multiscales"]
    transforms = [d["coordinateTransformations"] for d in multiscale["datasets"]]
    # Level k's voxel 0 is the centre of base voxels 0 .. f**k - 1: offset x 2 voxels of 4 nm
    # is 8 nm, plus (8 - 4) / 2 at level 1; z (factor 1) stays at 1 x 40 nm.
    assert transforms[0] == [{"type": "scale", "scale": [40, 4, 4]},
                             {"type": "translation", "translation": [40, 0, 8]}]  # fmt: skip
    assert transforms[1] == [{"type": "scale", "scale": [40, 8, 8]},
                             {"type": "translation", "translation": [40, 2, 10]}]  # fmt: skip
    assert [axis["name"] for axis in multiscale["axes"]] == ["z", "y", "x"]
    bare = _plan(np.zeros((4, 4, 4), np.uint8), zarr_layout="array")
    assert [k for k, _ in bare.metadata_documents()] == ["zarr.json"]


def test_the_byte_stage_and_report_rows() -> None:
    plan = _plan(np.zeros((8, 16, 32), np.uint8), chunk_size=(8, 8, 8), shard_shape=(16, 16, 8),
                 compression="zstd", compression_level=7)  # fmt: skip
    stage = plan.byte_stage
    assert (stage.codec, stage.level) == ("zstd", 7) and stage.host is not None
    none = _plan(np.zeros((8, 16, 32), np.uint8), compression="none").byte_stage
    assert (none.codec, none.level, none.host) == (None, None, None)
    described = _layout(plan).describe(plan)
    assert described == {
        "zarr_axes": "zyx", "zarr_shape": [8, 16, 32], "zarr_shard_shape": [8, 16, 16],
        "zarr_chunk_shape": [8, 8, 8], "shard_index_bytes": 16 * 4 + 4,
    }  # fmt: skip
    assert _layout(plan).gpu_refusal() is None and not _layout(plan).encodes_jpeg


def test_what_zarr3_output_does_not_do_is_refused() -> None:
    volume = np.zeros((8, 16, 32), np.uint8)
    with pytest.raises(OptionError, match="encoding='png' is a precomputed chunk encoding"):
        _plan(volume, encoding="png")
    for shape in ((12, 8, 8), (0, 8, 8)):
        with pytest.raises(OptionError, match=r"must be a positive multiple of the chunk size "
                                              r"8 x 8 x 8"):  # fmt: skip
            _plan(volume, chunk_size=(8, 8, 8), shard_shape=shape)
    plan = _plan(volume)
    with pytest.raises(PlanError, match="never hashed"):
        plan.scattered_chunk_coords(0)
    with pytest.raises(PlanError, match="need a precomputed volume source"):
        _layout(plan).naming({"mesh": "mesh"})
    with pytest.raises(PlanError, match="cannot be a segmentation"):
        _plan(np.zeros((4, 4, 4), np.float32), layer_type="segmentation")


def test_voxels_neuroglancer_cannot_show_are_written_with_a_warning() -> None:
    with pytest.warns(ShardwrightWarning, match="Neuroglancer cannot display float64 voxels"):
        plan = _plan(np.zeros((4, 4, 4), np.float64))
    assert dict(plan.metadata_documents())["0/zarr.json"]["data_type"] == "float64"
