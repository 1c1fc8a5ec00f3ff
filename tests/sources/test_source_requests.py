"""The small pieces every reader shares, alone: what a request to read asks
(`sources/request.py`), a source named by its TensorStore spec (`sources/spec.py`: its
refusals, its axes and the offset its domain places it at, read back against TensorStore's
own read) and a TIFF told by its name (`sources/kinds.py`)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest
import tensorstore as ts

from shardwright.errors import SourceError
from shardwright.sources.kinds import is_tiff_name
from shardwright.sources.request import SourceRequest
from shardwright.sources.spec import open_spec


def test_a_request_for_a_node_inside_keeps_its_options_and_drops_its_scale() -> None:
    asked = SourceRequest("gs://b/v.zarr", axes="zyx", scale_key="s1",
                          storage_options={"token": "anon"}, fill_missing=True)  # fmt: skip
    inside = asked.at("gs://b/v.zarr/s1")
    assert inside == dataclasses.replace(asked, url="gs://b/v.zarr/s1", scale_key=None)
    assert asked.at("gs://b/v.zarr/s2", scale_key="s2").scale_key == "s2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.url = "elsewhere"  # type: ignore[misc]


def test_a_scale_asked_of_a_source_without_scales_is_one_line() -> None:
    SourceRequest("v.npy").refuse_scales("a .npy array")  # none asked: nothing said
    with pytest.raises(SourceError, match=r"^v.npy: a .npy array has no scales; scale_key "):
        SourceRequest("v.npy", scale_key="0").refuse_scales("a .npy array")


def _zarr3(path: pathlib.Path, labels: list[str]) -> tuple[dict[str, object], np.ndarray]:
    """A Zarr v3 array written by TensorStore, shaped (4, 5, 6) in its own order, and its
    spec (kvstore only)."""
    spec: dict[str, object] = {"driver": "zarr3", "kvstore": f"file://{path}/"}
    values = np.arange(4 * 5 * 6, dtype=np.uint16).reshape(4, 5, 6)
    metadata = {"shape": [4, 5, 6], "data_type": "uint16", "dimension_names": labels}
    store = ts.open({**spec, "create": True, "metadata": metadata}).result()
    store.write(values).result()
    return spec, values


def test_a_spec_text_or_file_opens_its_array_in_its_labelled_order(tmp_path: pathlib.Path) -> None:
    """Labels x, y, z say the array's order (here x first); the voxels read are TensorStore's
    own, in x, y, z; an inline spec is named by its driver, a file by its path."""
    spec, values = _zarr3(tmp_path / "a.zarr", ["x", "y", "z"])
    inline = open_spec(SourceRequest(json.dumps(spec)))
    assert inline.url == "tensorstore:zarr3" and inline.axes == "xyz"
    assert inline.shape_xyz == (4, 5, 6) and inline.hints.voxel_offset is None
    np.testing.assert_array_equal(inline.read((0, 0, 0), (4, 5, 6))[..., 0], values)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    from_file = open_spec(SourceRequest(f"file://{tmp_path / 'spec.json'}"))
    assert from_file.url == f"file://{tmp_path / 'spec.json'}" and from_file.axes == "xyz"


def test_a_translated_domain_places_the_array_at_its_first_index(tmp_path: pathlib.Path) -> None:
    spec, values = _zarr3(tmp_path / "a.zarr", ["z", "y", "x"])
    moved = {**spec, "transform": {"input_inclusive_min": [3, 0, 7],
                                   "input_exclusive_max": [7, 5, 13],
                                   "input_labels": ["z", "y", "x"],
                                   "output": [{"input_dimension": 0, "offset": -3},
                                              {"input_dimension": 1},
                                              {"input_dimension": 2, "offset": -7}]}}  # fmt: skip
    source = open_spec(SourceRequest(json.dumps(moved)))
    assert source.axes == "zyx" and source.shape_xyz == (6, 5, 4)
    assert source.hints.voxel_offset == (7, 0, 3)
    assert source.hints.placed_by == "its TensorStore domain"
    box = source.read((0, 0, 0), (6, 5, 4))[..., 0]  # from the first voxel, at the offset
    np.testing.assert_array_equal(box, values.transpose(2, 1, 0))


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        (dict(scale_key="0"), "a TensorStore spec names one array; no scale_key"),
        (dict(storage_options={"anon": True}), "carries its own kvstore options"),
    ],
)
def test_what_a_spec_does_not_take_is_refused(asked: dict[str, object], said: str) -> None:
    with pytest.raises(SourceError, match=said):
        open_spec(SourceRequest('{"driver": "zarr3"}', **asked))  # type: ignore[arg-type]


def test_a_spec_that_is_none_is_one_line_naming_where_it_was(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SourceError, match=r"nothing.json: source does not exist$"):
        open_spec(SourceRequest(str(tmp_path / "nothing.json")))
    with pytest.raises(SourceError, match=r"folder.json: cannot read \("):
        (tmp_path / "folder.json").mkdir()
        open_spec(SourceRequest(str(tmp_path / "folder.json")))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SourceError, match="list.json: expected a JSON object, found list"):
        open_spec(SourceRequest(str(tmp_path / "list.json")))
    with pytest.raises(SourceError, match="the TensorStore spec: not a TensorStore spec \\(a JSON"):
        open_spec(SourceRequest('{"kvstore": "file:///x/"}'))
    with pytest.raises(SourceError, match="the TensorStore spec: not valid JSON"):
        open_spec(SourceRequest("{driver: zarr3}"))


@pytest.mark.parametrize(
    ("name", "tiff"),
    [
        ("slice_0001.tif", True),
        ("/data/stack/SLICE.TIFF", True),
        ("gs://bucket/em/z0.tiff", True),
        ("/data/stack/._slice_0001.tif", False),  # a macOS resource fork beside the slice
        ("volume.tif.gz", False),
        ("tiffs", False),
    ],
)
def test_a_tiff_is_told_by_its_name(name: str, tiff: bool) -> None:
    assert is_tiff_name(name) == tiff
