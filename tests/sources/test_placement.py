"""Where a volume sits is carried from its source to both formats and checked like voxels.

Sources are written as labs write them: OME-Zarr 0.4 (bioformats2raw's t,c,z,y,x) and 0.5 by
ome-zarr-py with translations in nanometres and micrometres, its labels as `image-label`
images, a TensorStore spec with a translated domain. The outputs are read by independent
readers: TensorStore places a precomputed volume at its voxel offset, ome-zarr-models
validates the OME-Zarr 0.5 group, and the translation it holds is the source's.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import ome_zarr_models
import pytest
import tensorstore as ts
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.io import parse_url
from ome_zarr.writer import write_labels, write_multiscale

from shardwright import api
from shardwright.errors import PlanError, SourceError

# The finest level: 8 x 8 x 40 nm voxels, voxel 0 at (400, 80, 160) nm = voxel (50, 10, 4).
VOXEL_NM = {"x": 8.0, "y": 8.0, "z": 40.0}
ORIGIN_NM = {"x": 400.0, "y": 80.0, "z": 160.0}
OFFSET = (50, 10, 4)
ZYX = (12, 24, 40)
RUN = dict(scheduler="sync", progress=False, chunk_size=(16, 8, 4))


def _image() -> np.ndarray:
    z, y, x = np.indices(ZYX)
    return ((x * 7 + y * 3 + z * 11) % 251).astype(np.uint8)


def _write_ome(path: pathlib.Path, version: str, axes: str, unit: str = "nanometer") -> np.ndarray:
    """An OME-Zarr image of two levels (x and y halved) as ome-zarr-py writes it, placed by
    translations in `unit`; level 1 centred on the voxels it summarises. Returns level 0."""
    per_nm = {"nanometer": 1.0, "micrometer": 1e-3}[unit]
    image = _image()
    coarse = image[:, ::2, ::2]
    shape = {"t": 1, "c": 1}
    level0 = image.reshape([shape.get(a, 1) for a in axes if a in "tc"] + list(ZYX))
    level1 = coarse.reshape([shape.get(a, 1) for a in axes if a in "tc"] + list(coarse.shape))
    transforms = []
    for k in (0, 1):
        factor = {"x": 2**k, "y": 2**k, "z": 1}
        scale = [VOXEL_NM[a] * factor[a] * per_nm if a in "xyz" else 1.0 for a in axes]
        shift = [
            (ORIGIN_NM[a] + VOXEL_NM[a] * (factor[a] - 1) / 2) * per_nm if a in "xyz" else 0.0
            for a in axes
        ]
        transforms.append(
            [{"type": "scale", "scale": scale}, {"type": "translation", "translation": shift}]
        )
    kinds = {"t": "time", "c": "channel"}
    axis_entries = [
        {"name": a, "type": kinds[a]} if a in kinds else {"name": a, "type": "space", "unit": unit}
        for a in axes
    ]
    fmt = FormatV04() if version == "0.4" else FormatV05()
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store)
    write_multiscale(
        [level0, level1], root, axes=axis_entries, fmt=fmt,
        coordinate_transformations=transforms, storage_options={"chunks": level0.shape},
    )  # fmt: skip
    return image


def _ome_translation(dest: pathlib.Path) -> tuple[list[Any], list[float], list[float]]:
    """(axes, scale, translation) of level 0 of an OME-Zarr group, valid for ome-zarr-models."""
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(dest), mode="r"))
    (multiscale,) = json.loads((dest / "zarr.json").read_text())["attributes"]["ome"]["multiscales"]
    scale, shift = multiscale["datasets"][0]["coordinateTransformations"]
    return multiscale["axes"], scale["scale"], shift["translation"]


CASES = [("0.4", "tczyx", "nanometer"), ("0.5", "zyx", "micrometer")]


@pytest.mark.parametrize("version, axes, unit", CASES)
def test_ome_zarr_translation_reaches_both_formats(
    tmp_path: pathlib.Path, version: str, axes: str, unit: str
) -> None:
    """A translated OME-Zarr image converts to precomputed at its voxel offset (TensorStore
    reads it there) and to zarr3 with its own scale, translation and unit (valid OME-Zarr
    0.5, a single time point and channel dropped); verify compares the placement and passes."""
    source = tmp_path / "image.ome.zarr"
    image = _write_ome(source, version, axes, unit)
    plan = api.plan(str(source), str(tmp_path / "p"))
    assert "offset 50 x 10 x 4 voxels (400 x 80 x 160 nm)" in plan.report()
    assert "written in" not in plan.report()  # precomputed records nanometres
    zarr3_report = api.plan(str(source), str(tmp_path / "p"), format="zarr3").report()
    assert ("; written in micrometers" in zarr3_report) == (unit == "micrometer")
    api.convert(str(source), str(tmp_path / "pc"), **RUN)
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    volume = store.result()
    assert volume.domain.inclusive_min == (*OFFSET, 0)
    info = json.loads((tmp_path / "pc" / "info").read_text())
    assert info["scales"][0]["resolution"] == [8, 8, 40]
    np.testing.assert_array_equal(volume.read().result()[..., 0], image.T)

    api.convert(str(source), str(tmp_path / "z3"), format="zarr3", **RUN)
    out_axes, scale, shift = _ome_translation(tmp_path / "z3")
    assert [a["name"] for a in out_axes] == ["z", "y", "x"]
    assert {a["unit"] for a in out_axes} == {unit}
    per_nm = 1e-3 if unit == "micrometer" else 1.0
    assert scale == pytest.approx([VOXEL_NM[a] * per_nm for a in "zyx"])
    assert shift == pytest.approx([ORIGIN_NM[a] * per_nm for a in "zyx"])
    level = ts.open({"driver": "zarr3", "kvstore": f"file://{tmp_path}/z3/0/"}).result()
    np.testing.assert_array_equal(level.read().result(), image)
    for dest in ("pc", "z3"):
        report = api.verify(str(tmp_path / dest), str(source), full=True)
        assert report.ok, report.problems
        assert not any("given with" in note for note in report.notes)


def test_an_ome_zarr_written_with_zarr_python_alone_is_placed(tmp_path: pathlib.Path) -> None:
    """OME-Zarr 0.5 written with zarr-python's own API (the group's `ome` attributes set by
    hand, as many pipelines do), its translation on the multiscale rather than the dataset,
    in micrometres: converted to precomputed at voxel (50, 10, 4), read so by TensorStore."""
    source = tmp_path / "by-hand.ome.zarr"
    group = zarr.open_group(str(source), mode="w", zarr_format=3)
    array = group.create_array("0", shape=ZYX, chunks=ZYX, dtype="uint8")
    array[...] = _image()
    group.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [{
            "axes": [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"],
            "datasets": [{"path": "0", "coordinateTransformations": [
                {"type": "scale", "scale": [0.04, 0.008, 0.008]}]}],
            "coordinateTransformations": [
                {"type": "translation", "translation": [0.16, 0.08, 0.4]}],
        }],
    }  # fmt: skip
    api.convert(str(source), str(tmp_path / "pc"), **RUN)
    volume = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    assert volume.result().domain.inclusive_min == (*OFFSET, 0)
    assert api.verify(str(tmp_path / "pc"), str(source), full=True).ok


def test_a_coarser_level_keeps_its_own_placement(tmp_path: pathlib.Path) -> None:
    """Dataset s1 (16 x 16 x 40 nm, centred on the voxels it summarises) converts to
    precomputed at voxel (25, 5, 4) of its own size, and to zarr3 with the source's s1
    translation exactly (its centring kept)."""
    source = tmp_path / "image.ome.zarr"
    _write_ome(source, "0.5", "zyx")
    api.convert(str(source), str(tmp_path / "pc"), source_scale="s1", **RUN)
    volume = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    assert volume.result().domain.inclusive_min == (25, 5, 4, 0)
    api.convert(str(source), str(tmp_path / "z3"), source_scale="s1", format="zarr3", **RUN)
    _, scale, shift = _ome_translation(tmp_path / "z3")
    group = json.loads((source / "zarr.json").read_text())["attributes"]["ome"]
    original = group["multiscales"][0]["datasets"][1]["coordinateTransformations"]
    assert scale == pytest.approx(original[0]["scale"])
    assert shift == pytest.approx(original[1]["translation"])
    for dest in ("pc", "z3"):  # read at the scale the job recorded: s1, not given here
        assert api.verify(str(tmp_path / dest), str(source)).ok


def test_a_bioformats2raw_container_converts_as_its_series(tmp_path: pathlib.Path) -> None:
    """bioformats2raw's layout: a group marked `bioformats2raw.layout` holding its image
    series 0/ (t,c,z,y,x). Naming the container converts its one series, placed; a container
    of two series is refused, naming them."""
    container = tmp_path / "plate.zarr"
    root = zarr.open_group(str(container), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    image = _write_ome(container / "0", "0.4", "tczyx")
    api.convert(str(container), str(tmp_path / "pc"), **RUN)
    volume = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    assert volume.result().domain.inclusive_min == (*OFFSET, 0)
    np.testing.assert_array_equal(volume.result().read().result()[..., 0], image.T)
    assert api.verify(str(tmp_path / "pc"), str(container), full=True).ok
    _write_ome(container / "1", "0.4", "tczyx")
    with pytest.raises(SourceError, match="several image series; name one"):
        api.plan(str(container), str(tmp_path / "again"))


def test_verify_fails_where_the_output_is_not_where_the_source_is(tmp_path: pathlib.Path) -> None:
    """The source moves one voxel along x after its conversion: the voxels still match, the
    placement does not, and verify says so for both formats (exit status of a problem)."""
    source = tmp_path / "image.ome.zarr"
    _write_ome(source, "0.5", "zyx")
    for fmt in ("precomputed", "zarr3"):
        api.convert(str(source), str(tmp_path / fmt), format=fmt, **RUN)
    meta = json.loads((source / "zarr.json").read_text())
    for dataset in meta["attributes"]["ome"]["multiscales"][0]["datasets"]:
        dataset["coordinateTransformations"][1]["translation"][2] += 8.0  # x, in nm
    (source / "zarr.json").write_text(json.dumps(meta))
    offset = api.verify(str(tmp_path / "precomputed"), str(source))
    assert any("voxel offset is 50,10,4, expected 51,10,4" in p for p in offset.problems)
    translation = api.verify(str(tmp_path / "zarr3"), str(source))
    assert any(
        "translation (nm) is 400,80,160, expected 408,80,160" in p for p in translation.problems
    )


def test_an_offset_given_is_a_note_not_a_problem(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "image.ome.zarr"
    _write_ome(source, "0.4", "tczyx")
    api.convert(str(source), str(tmp_path / "pc"), voxel_offset=(0, 0, 0), **RUN)
    report = api.verify(str(tmp_path / "pc"), str(source))
    assert report.ok, report.problems
    assert "voxel offset 0,0,0 was given with --voxel-offset (the source's own: 50,10,4)" in (
        report.notes
    )


def _rewrite_transforms(source: pathlib.Path, edit: Any) -> None:
    meta = json.loads((source / "zarr.json").read_text())
    edit(meta["attributes"]["ome"]["multiscales"][0])
    (source / "zarr.json").write_text(json.dumps(meta))


def test_placements_that_cannot_be_carried_are_refused(tmp_path: pathlib.Path) -> None:
    """Half a voxel of translation, or an affine transform, is refused before anything is
    written, naming the options that replace it; given those, the conversion runs."""
    source = tmp_path / "image.ome.zarr"
    _write_ome(source, "0.5", "zyx")

    def half_voxel(multiscale: dict[str, Any]) -> None:
        multiscale["datasets"][0]["coordinateTransformations"][1]["translation"][2] += 4.0

    _rewrite_transforms(source, half_voxel)
    with pytest.raises(PlanError, match="places voxel 0 at 50.5 voxels along x.*voxel_offset"):
        api.plan(str(source), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    api.plan(str(source), str(tmp_path / "out"), voxel_offset=(50, 10, 4))

    def affine(multiscale: dict[str, Any]) -> None:
        rows = [[1, 0, 0, 0], [0, 0.7, -0.7, 0], [0, 0.7, 0.7, 0]]
        multiscale["coordinateTransformations"] = [{"type": "affine", "affine": rows}]

    _rewrite_transforms(source, affine)
    with pytest.raises(PlanError, match="'affine' coordinate transformation is not a scale"):
        api.plan(str(source), str(tmp_path / "out"), voxel_offset=(50, 10, 4))
    plan = api.plan(
        str(source), str(tmp_path / "out"), voxel_offset=(1, 2, 3), resolution=(4, 4, 40)
    )
    assert "offset 1 x 2 x 3 voxels (4 x 8 x 120 nm)" in plan.report()


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_an_ome_zarr_label_image_converts_as_a_segmentation(
    tmp_path: pathlib.Path, version: str
) -> None:
    """ome-zarr-py's labels (`image-label`, uint16) convert as a segmentation: precomputed
    `type: segmentation`, zarr3 an `image-label` group; their voxels are the labels."""
    source = tmp_path / "image.ome.zarr"
    _write_ome(source, version, "zyx")
    fmt = FormatV04() if version == "0.4" else FormatV05()
    labels = (_image() // 32).astype(np.uint16)
    root = zarr.open_group(str(source), mode="a")
    write_labels(labels, root, name="cells", axes="zyx", fmt=fmt, scale_factors=None)
    cells = source / "labels" / "cells"
    api.convert(str(cells), str(tmp_path / "pc"), **RUN)
    assert json.loads((tmp_path / "pc" / "info").read_text())["type"] == "segmentation"
    volume = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    np.testing.assert_array_equal(volume.result().read().result()[..., 0], labels.T)
    api.convert(str(cells), str(tmp_path / "z3"), format="zarr3", **RUN)
    group = json.loads((tmp_path / "z3" / "zarr.json").read_text())["attributes"]["ome"]
    assert "image-label" in group
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(tmp_path / "z3"), mode="r"))


def test_a_spec_with_a_translated_domain_places_the_array(tmp_path: pathlib.Path) -> None:
    """A TensorStore spec whose domain starts at (z, y, x) = (4, 10, 50) is read from there,
    and its conversion sits at voxel (50, 10, 4)."""
    image = _image()
    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=ZYX, chunks=ZYX, dtype="uint8")
    array[...] = image
    spec = {
        "driver": "zarr3",
        "kvstore": f"file://{tmp_path}/a.zarr/",
        "transform": {
            "input_inclusive_min": [4, 10, 50],
            "input_exclusive_max": [4 + ZYX[0], 10 + ZYX[1], 50 + ZYX[2]],
            "input_labels": ["z", "y", "x"],
            "output": [
                {"input_dimension": 0, "offset": -4},
                {"input_dimension": 1, "offset": -10},
                {"input_dimension": 2, "offset": -50},
            ],
        },
    }
    plan = api.plan(json.dumps(spec), str(tmp_path / "pc"), resolution=(8, 8, 40))
    assert "offset 50 x 10 x 4 voxels (400 x 80 x 160 nm) (from its TensorStore domain)" in (
        plan.report()
    )
    api.convert(json.dumps(spec), str(tmp_path / "pc"), resolution=(8, 8, 40), **RUN)
    volume = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/pc/"})
    assert volume.result().domain.inclusive_min == (*OFFSET, 0)
    np.testing.assert_array_equal(volume.result().read().result()[..., 0], image.T)


def test_the_plan_says_where_every_source_is_placed_from(tmp_path: pathlib.Path) -> None:
    """An array without metadata: offset 0, said; a precomputed volume: from its info."""
    np.save(tmp_path / "a.npy", _image())
    report = api.plan(str(tmp_path / "a.npy"), str(tmp_path / "x"), resolution=(8, 8, 40)).report()
    assert (
        "placement    voxel 8 x 8 x 40 nm (as given), offset 0 x 0 x 0 voxels (0 x 0 x 0 nm) "
        "(none recorded in the source)" in report
    )
    api.convert(str(tmp_path / "a.npy"), str(tmp_path / "pc"), resolution=(8, 8, 40),
                voxel_offset=OFFSET, **RUN)  # fmt: skip
    report = api.plan(str(tmp_path / "pc"), str(tmp_path / "y")).report()
    assert "offset 50 x 10 x 4 voxels (400 x 80 x 160 nm): both from its info (scale 8_8_40)" in (
        report
    )
