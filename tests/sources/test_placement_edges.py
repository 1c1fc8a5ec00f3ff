"""Placement as the user means it, at the edges: an OME-Zarr scale without a unit is the voxel
size in nm (never replaced by 1 nm), a voxel size or offset typed in another axis order is
refused naming x,y,z, any other value given is an override printed and recorded beside the
source's, and 2-D images (y,x and c,y,x) convert as volumes one slice thick.

Sources are written as labs write them (ome-zarr-py, zarr-python, tifffile, NumPy); outputs
are read back by TensorStore, zarr-python and ome-zarr-models, not by shardwright.
"""

from __future__ import annotations

import json
import pathlib
import warnings
from typing import Any

import numpy as np
import ome_zarr_models
import pytest
import tensorstore as ts
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.io import parse_url
from ome_zarr.writer import write_multiscale

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.errors import PlanError, ShardwrightWarning

RUN: dict[str, Any] = dict(scheduler="sync", progress=False)
ZYX = (6, 12, 20)


def _image(shape: tuple[int, ...] = ZYX) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) * 7 % 251).astype(np.uint8)


def _write_ome(
    path: pathlib.Path,
    units: dict[str, str | None],
    scale_zyx: tuple[float, float, float],
    shift_zyx: tuple[float, float, float],
    version: str = "0.4",
) -> np.ndarray:
    """One level of z,y,x as ome-zarr-py writes it, each space axis with `units[axis]` (no
    `unit` key where None). Returns the image."""
    image = _image()
    fmt = FormatV04() if version == "0.4" else FormatV05()
    axes = [{"name": a, "type": "space", **({"unit": units[a]} if units[a] else {})} for a in "zyx"]
    transforms = [
        [
            {"type": "scale", "scale": list(scale_zyx)},
            {"type": "translation", "translation": list(shift_zyx)},
        ]
    ]
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store)
    write_multiscale([image], root, axes=axes, fmt=fmt, coordinate_transformations=transforms)
    return image


def _precomputed(dest: pathlib.Path) -> Any:
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}).result()


NO_UNITS: dict[str, str | None] = {"z": None, "y": None, "x": None}


def test_an_ome_scale_without_a_unit_is_the_voxel_size_in_nm(tmp_path: pathlib.Path) -> None:
    """Axes with no `unit`, scale 40,4,4 (z,y,x): written at 4,4,40 nm, not 1,1,1, with no
    warning that the source records no voxel size; the plan says the scale was read as nm;
    TensorStore places it at its translation's voxel; the zarr3 output is valid OME-Zarr in
    nanometres; verify compares both and passes."""
    source = tmp_path / "unitless.ome.zarr"
    image = _write_ome(source, NO_UNITS, (40, 4, 4), (160, 40, 80))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShardwrightWarning)  # "records no voxel size" is false
        plan = api.plan(str(source), str(tmp_path / "pc"))
        api.convert(plan, **RUN)
        api.convert(str(source), str(tmp_path / "z3"), format="zarr3", **RUN)
    assert (
        "voxel 4 x 4 x 40 nm, offset 20 x 10 x 4 voxels (80 x 40 x 160 nm): both from "
        "OME-Zarr 0.4 dataset 's0' (no unit: read as nm)"
    ) in plan.report()
    volume = _precomputed(tmp_path / "pc")
    assert volume.domain.inclusive_min == (20, 10, 4, 0)
    assert [float(u.multiplier) for u in volume.dimension_units[:3]] == [4, 4, 40]
    np.testing.assert_array_equal(volume.read().result()[..., 0], image.T)
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(tmp_path / "z3"), mode="r"))
    (multiscale,) = json.loads((tmp_path / "z3" / "zarr.json").read_text())["attributes"]["ome"][
        "multiscales"
    ]
    assert {a["unit"] for a in multiscale["axes"]} == {"nanometer"}
    scale, shift = multiscale["datasets"][0]["coordinateTransformations"]
    assert scale["scale"] == [40, 4, 4] and shift["translation"] == [160, 40, 80]
    for dest in ("pc", "z3"):
        report = api.verify(str(tmp_path / dest), str(source), full=True)
        assert report.ok, report.problems


def test_units_that_are_no_length_or_only_on_some_axes_are_refused(
    tmp_path: pathlib.Path,
) -> None:
    """z in micrometres, y and x with no unit: nothing says what y and x are in; refused
    naming the units and the option that gives the voxel size, which then plans."""
    source = tmp_path / "mixed.ome.zarr"
    _write_ome(source, {"z": "micrometer", "y": None, "x": None}, (0.04, 4, 4), (0, 0, 0))
    with pytest.raises(PlanError, match=r"units \(x None, y None, z 'micrometer'\).*resolution"):
        api.plan(str(source), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    plan = api.plan(str(source), str(tmp_path / "out"), resolution=(4, 4, 40))
    assert "voxel 4 x 4 x 40 nm (as given)" in plan.report()


NM = {"z": "nanometer", "y": "nanometer", "x": "nanometer"}


@pytest.mark.parametrize(
    "flag, given, fixed",
    [("--resolution", "40,8,8", "8,8,40"), ("--voxel-offset", "4,10,50", "50,10,4")],
)
def test_a_value_typed_in_z_y_x_order_is_refused_naming_x_y_z(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], flag: str, given: str, fixed: str
) -> None:
    """The source records 8,8,40 nm at voxel 50,10,4 (x,y,z); the same numbers typed z,y,x
    would land the data elsewhere, squashed: refused in one line naming the x,y,z order and
    the value that would be right, before anything is written (API and command line)."""
    source = tmp_path / "em.ome.zarr"
    _write_ome(source, NM, (40, 8, 8), (160, 80, 400), version="0.5")
    dest = tmp_path / "out"
    field = flag.removeprefix("--").replace("-", "_")
    values = tuple(float(v) for v in given.split(","))
    with pytest.raises(PlanError, match="in another order: give it x,y,z"):
        api.convert(str(source), str(dest), **{field: values}, **RUN)
    assert cli_main(["convert", str(source), str(dest), flag, given, "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {given} is the source's" in err and f"({flag} {fixed})" in err
    assert "x,y,z, from OME-Zarr 0.5 dataset 's0'" in err and "Traceback" not in err
    assert not dest.exists()


def test_another_value_given_is_an_override_beside_the_source_s(tmp_path: pathlib.Path) -> None:
    """A voxel size that is no reordering of the source's replaces it: the plan prints both,
    the manifest records both, TensorStore reads the given one, verify notes it."""
    source = tmp_path / "em.ome.zarr"
    _write_ome(source, NM, (40, 8, 8), (160, 80, 400), version="0.5")
    dest = tmp_path / "out"
    plan = api.plan(str(source), str(dest), resolution=(8, 8, 30))
    assert (
        "voxel 8 x 8 x 30 nm (as given; the source's: 8 x 8 x 40 nm, from OME-Zarr 0.5 "
        "dataset 's0')"
    ) in plan.report()
    manifest = api.convert(plan, **RUN)
    placed = manifest.plan["placement"]
    assert placed["resolution_from"] == "option" and manifest.plan["resolution_xyz"] == [8, 8, 30]
    assert placed["source_resolution_xyz"] == [8, 8, 40]
    assert "source_voxel_offset_xyz" not in placed  # the offset is the source's own
    written = json.loads((dest / "shardwright-manifest.json").read_text())
    assert written["plan"]["placement"]["source_resolution_xyz"] == [8, 8, 40]
    volume = _precomputed(dest)
    assert [float(u.multiplier) for u in volume.dimension_units[:3]] == [8, 8, 30]
    report = api.verify(str(dest), str(source))
    assert report.ok, report.problems
    assert any("8,8,30 was given with --resolution (the source's own: 8,8,40)" in n
               for n in report.notes)  # fmt: skip


# -- 2-D images -----------------------------------------------------------------------------
def test_a_2d_image_converts_as_a_volume_one_slice_thick(tmp_path: pathlib.Path) -> None:
    """A y,x .npy and a single-page TIFF: precomputed of z size 1, read back by TensorStore
    equal to the image; verify compares it."""
    image = _image((30, 44))
    np.save(tmp_path / "image.npy", image)
    tifffile.imwrite(tmp_path / "image.tif", image)
    for name in ("image.npy", "image.tif"):
        dest = tmp_path / f"{name}.out"
        api.convert(str(tmp_path / name), str(dest), resolution=(4, 4, 4), **RUN)
        volume = _precomputed(dest)
        assert volume.domain.shape == (44, 30, 1, 1)
        np.testing.assert_array_equal(volume.read().result()[:, :, 0, 0], image.T)
        assert api.verify(str(dest), str(tmp_path / name), full=True).ok


def test_a_2d_ome_zarr_with_channels_converts_with_its_placement(tmp_path: pathlib.Path) -> None:
    """OME-Zarr 0.5 of axes c,y,x in micrometres, translated, with a level halving y and x:
    to zarr3 a c,z,y,x array of one slice (zarr-python reads the image back, ome-zarr-models
    validates the group), to precomputed at the translation's voxel with 3 channels, and its
    pyramid keeps z whole."""
    source = tmp_path / "cells.ome.zarr"
    image = _image((3, 24, 40))
    fmt = FormatV05()
    root = zarr.group(store=parse_url(str(source), mode="w", fmt=fmt).store)
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": a, "type": "space", "unit": "micrometer"} for a in "yx"
    ]
    transforms = [
        [{"type": "scale", "scale": [1, 0.5, 0.25]}, {"type": "translation",
                                                      "translation": [0, 1.0, 2.0]}],
        [{"type": "scale", "scale": [1, 1.0, 0.5]}, {"type": "translation",
                                                     "translation": [0, 1.25, 2.125]}],
    ]  # fmt: skip
    write_multiscale([image, image[:, ::2, ::2]], root, axes=axes, fmt=fmt,
                     coordinate_transformations=transforms)  # fmt: skip
    api.convert(str(source), str(tmp_path / "z3"), format="zarr3", **RUN)
    level = zarr.open_group(str(tmp_path / "z3"), mode="r")["0"]
    assert level.shape == (3, 1, 24, 40)
    np.testing.assert_array_equal(level[:, 0], image)
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(tmp_path / "z3"), mode="r"))
    api.convert(str(source), str(tmp_path / "pc"), mips=1, **RUN)
    volume = _precomputed(tmp_path / "pc")
    assert volume.domain.inclusive_min == (8, 2, 0, 0) and volume.domain.shape == (40, 24, 1, 3)
    np.testing.assert_array_equal(volume.read().result()[:, :, 0, :], image.transpose(2, 1, 0))
    info = json.loads((tmp_path / "pc" / "info").read_text())
    assert [s["size"] for s in info["scales"]] == [[40, 24, 1], [20, 12, 1]]
    for dest in ("z3", "pc"):
        report = api.verify(str(tmp_path / dest), str(source), full=True)
        assert report.ok, report.problems
