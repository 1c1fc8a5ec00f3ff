"""The voxel size a source records becomes the output's resolution; where it records none the
job says so (a warning naming the flag on the command line, the parameter in Python)."""

from __future__ import annotations

import json
import pathlib
import warnings

import h5py
import numpy as np
import pytest
import tifffile

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.errors import ShardwrightWarning
from shardwright.sources import open_source

VOLUME = np.arange(4 * 8 * 6, dtype=np.uint8).reshape(4, 8, 6)  # z, y, x


def _written_resolution(source: str, dest: pathlib.Path) -> list[float]:
    api.convert(source, str(dest), scheduler="sync", progress=False)
    return json.loads((dest / "info").read_text())["scales"][0]["resolution"]


@pytest.mark.parametrize(
    ("attribute", "values", "want"),
    [
        ("resolution", [40, 4, 4], [4, 4, 40]),  # nm, z y x (CREMI)
        ("element_size_um", [0.04, 0.008, 0.006], [6, 8, 40]),  # µm, z y x (ilastik, Fiji)
    ],
)
def test_hdf5_voxel_size_attributes(
    tmp_path: pathlib.Path, attribute: str, values: list[float], want: list[float]
) -> None:
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("raw", data=VOLUME).attrs[attribute] = values
    source = f"{tmp_path / 'v.h5'}#/raw"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShardwrightWarning)  # no guess, so no warning
        written = _written_resolution(source, tmp_path / "out")
    assert written == pytest.approx(want)


def test_hdf5_attributes_that_do_not_fit_are_ignored(tmp_path: pathlib.Path) -> None:
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("a", data=VOLUME).attrs["resolution"] = [4, 4]  # two values, 3 axes
        f.create_dataset("b", data=VOLUME).attrs["resolution"] = [40, 0, 4]
    for name in ("a", "b"):
        assert open_source(f"{tmp_path / 'v.h5'}#/{name}").hints.resolution is None


def test_imagej_tiff_voxel_size(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "stack.tif"
    tifffile.imwrite(
        path, VOLUME, imagej=True, resolution=(1 / 0.008, 1 / 0.006),
        metadata={"spacing": 0.04, "unit": "micron", "axes": "ZYX"},
    )  # fmt: skip
    assert _written_resolution(str(path), tmp_path / "out") == pytest.approx([8, 6, 40])


@pytest.mark.filterwarnings("default::shardwright.errors.ShardwrightWarning")
def test_a_guessed_resolution_is_said_once_in_each_front_ends_words(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "v.npy", VOLUME)
    with pytest.warns(ShardwrightWarning, match=r"writing 1,1,1 nm.* with resolution$"):
        api.plan(str(tmp_path / "v.npy"), str(tmp_path / "api-out"))
    assert cli_main(["plan", str(tmp_path / "v.npy"), str(tmp_path / "cli-out")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert "shardwright plan: warning: " in err and "with --resolution" in err
    assert cli_main(["plan", str(tmp_path / "v.npy"), str(tmp_path / "cli-out"),
                     "--resolution", "8,8,40"]) == 0  # fmt: skip
    assert "warning" not in capsys.readouterr().err
