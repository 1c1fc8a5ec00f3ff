"""Making a volume's plan: the layer type and encoding chosen, the voxel size and offset taken
from the options, else the source, else the default (and said where from), and a source's
own placement refused where it cannot be carried."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardwright.errors import GpuUnavailable, OptionError, PlanError, ShardwrightWarning
from shardwright.options import ConvertOptions
from shardwright.planning import builder
from shardwright.planning.builder import make_plan
from shardwright.planning.formats import conversion_formats
from shardwright.planning.geometry import DEFAULT, OPTION
from shardwright.sources import SourceHints


class _Hinted:
    """A small source whose metadata says what `hints` say."""

    url = "memory://hinted"
    axes = "zyx"
    num_channels = 1

    def __init__(self, hints: SourceHints, dtype: str = "uint8") -> None:
        self.hints = hints
        self.dtype = np.dtype(dtype)
        self.shape_xyz = (16, 8, 4)

    def read(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        return np.zeros((*shape, 1), self.dtype)

    def read_native(self, start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        return self.read(start, stop)[..., 0].T


@pytest.mark.parametrize(
    ("asked", "hinted", "encoding", "dtype", "layer_type"),
    [
        ("image", "segmentation", None, "uint32", "image"),  # asked for wins
        ("auto", "segmentation", None, "uint8", "segmentation"),  # then the source's word
        (None, "image", None, "uint64", "image"),
        ("auto", None, "compressed_segmentation", "uint16", "segmentation"),
        ("auto", None, None, "uint32", "segmentation"),  # then the voxels: label types
        ("auto", None, None, "uint64", "segmentation"),
        ("auto", None, None, "uint16", "image"),
        ("auto", None, None, "float32", "image"),
    ],
)
def test_the_layer_type_is_asked_for_else_the_sources_else_the_voxels(
    asked: str | None, hinted: str | None, encoding: str | None, dtype: str, layer_type: str
) -> None:
    options = ConvertOptions(layer_type=asked, encoding=encoding)  # type: ignore[arg-type]
    assert builder._layer_type(options, hinted, np.dtype(dtype)) == layer_type


def test_an_unknown_layer_type_is_refused() -> None:
    with pytest.raises(PlanError, match="layer type must be image or segmentation, got 'mask'"):
        builder._layer_type(ConvertOptions(), "mask", np.dtype("uint8"))


def test_precomputed_label_volumes_default_to_compressed_segmentation() -> None:
    u32, u16 = np.dtype("uint32"), np.dtype("uint16")
    precomputed, zarr3 = conversion_formats()["precomputed"], conversion_formats()["zarr3"]
    assert precomputed.default_encoding("segmentation", u32) == "compressed_segmentation"
    assert precomputed.default_encoding("segmentation", u16) == "raw"
    assert precomputed.default_encoding("image", u32) == "raw"
    assert zarr3.default_encoding("segmentation", u32) == "raw"


def test_a_value_is_the_options_else_the_sources_else_the_default() -> None:
    assert builder._chosen((1, 2, 3), (4, 5, 6), (0, 0, 0), "its info") == ((1, 2, 3), OPTION)
    assert builder._chosen(None, (4, 5, 6), (0, 0, 0), "its info") == ((4, 5, 6), "its info")
    assert builder._chosen(None, None, (0, 0, 0), "its info") == ((0, 0, 0), DEFAULT)


def test_a_plan_takes_the_sources_placement_and_says_where_from() -> None:
    hints = SourceHints(resolution=(4, 4, 40), voxel_offset=(1, 2, 3), placed_by="its info",
                        unit="micrometer", layer_type="segmentation")  # fmt: skip
    plan = make_plan(_Hinted(hints), "/nowhere")
    assert plan.resolution == (4.0, 4.0, 40.0) and plan.voxel_offset == (1, 2, 3)
    assert (plan.placed.resolution_from, plan.placed.voxel_offset_from) == ("its info",) * 2
    assert plan.placed.unit == "micrometer" and plan.layer_type == "segmentation"
    given = make_plan(_Hinted(hints), "/nowhere", ConvertOptions(resolution=(8, 8, 8)))
    assert given.resolution == (8.0, 8.0, 8.0) and given.voxel_offset == (1, 2, 3)
    assert given.placed.resolution_from == OPTION and given.placed.unit == "nanometer"


def test_a_source_without_a_voxel_size_is_warned_of_and_written_at_1_nm() -> None:
    with pytest.warns(ShardwrightWarning, match="records no voxel size: writing 1,1,1 nm"):
        plan = make_plan(_Hinted(SourceHints()), "/nowhere")
    assert plan.resolution == (1.0, 1.0, 1.0) and plan.voxel_offset == (0, 0, 0)
    assert plan.placed.resolution_from == plan.placed.voxel_offset_from == DEFAULT


@pytest.mark.parametrize(
    ("hints", "options"),
    [
        ({"resolution_refusal": "a rotation cannot be written"}, {}),
        ({"offset_refusal": "a rotation cannot be written"}, {"resolution": (1, 1, 1)}),
    ],
)
def test_a_placement_the_output_cannot_carry_is_refused_unless_replaced(
    hints: dict[str, Any], options: dict[str, Any]
) -> None:
    with pytest.raises(PlanError, match="a rotation cannot be written"):
        make_plan(_Hinted(SourceHints(**hints)), "/nowhere", ConvertOptions(**options))
    replaced = ConvertOptions(resolution=(1, 1, 1), voxel_offset=(0, 0, 0))
    assert make_plan(_Hinted(SourceHints(**hints)), "/nowhere", replaced).resolution == (1, 1, 1)


def test_make_plan_refuses_before_reading_what_no_plan_can_honour() -> None:
    src = _Hinted(SourceHints(resolution=(1, 1, 1)))
    with pytest.raises(OptionError, match="scale_key applies to precomputed output"):
        make_plan(src, "/nowhere", ConvertOptions(format="zarr3", scale_key="s"))
    with pytest.raises(OptionError, match="applies to encoding='compressed_segmentation'"):
        labels = _Hinted(SourceHints(resolution=(1, 1, 1)), "uint32")
        block = ConvertOptions(layer_type="image", compressed_segmentation_block_size=(4, 4, 4))
        make_plan(labels, "/nowhere", block)
    with pytest.raises(PlanError, match="resolution must be three finite positive numbers"):
        make_plan(src, "/nowhere", ConvertOptions(resolution=(0, 1, 1)))
    with pytest.raises(GpuUnavailable, match="use the CPU engine for jpeg"):
        make_plan(src, "/nowhere", ConvertOptions(engine="gpu", encoding="jpeg"))
