"""Values a lab's volumes hold, as `plan`, `convert` and `verify --against` meet them through
the command line (`shardwright.cli.main`): NaN in float volumes (equal to NaN, as TensorStore
reads it; a NaN against a number still a difference), at the base, in pyramid levels and in a
dataset another tool wrote; a source's own fill value named wherever absent chunks are said
to be filled; and an image pyramid verified at the scale its job read, or refused in one
line naming the scale and the flag."""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Callable

import numpy as np
import pytest
import tensorstore as ts
import zarr
from ome_zarr.format import FormatV04
from ome_zarr.io import parse_url
from ome_zarr.writer import write_multiscale

from shardwright import cli

MANIFEST = "shardwright-manifest.json"
SYNC = ["--scheduler", "sync", "--quiet"]


def _main(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(words))
    said = capsys.readouterr()
    return code, said.out, said.err


def _zarr(path: pathlib.Path, zyx: np.ndarray, chunks: tuple[int, ...], fill: object) -> None:
    array = zarr.create_array(
        str(path), shape=zyx.shape, chunks=chunks, dtype=zyx.dtype, fill_value=fill
    )
    array[...] = zyx


def _with_nan(dtype: str = "float32") -> np.ndarray:
    """z, y, x voxels where every third voxel along x is NaN, the rest numbers."""
    zyx = np.random.default_rng(3).random((20, 24, 28)).astype(dtype)
    zyx[..., ::3] = np.nan
    return zyx


# -- 1. NaN equals NaN for verification -----------------------------------------------------
@pytest.mark.parametrize("output", ["precomputed", "zarr3"])
def test_a_float_volume_holding_nan_verifies_and_a_moved_nan_does_not(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """Base chunks and the pyramid's levels (NaN averaged into NaN): a faithful conversion
    verifies; a source where one NaN became a number, or one number NaN, does not."""
    zyx = _with_nan()
    _zarr(tmp_path / "src.zarr", zyx, (8, 8, 8), float("nan"))
    out = str(tmp_path / "out")
    code, _, err = _main(
        capsys, "convert", str(tmp_path / "src.zarr"), out, "--format", output,
        "--resolution", "4,4,40", "--chunk-size", "8,8,8", "--mips", "1", *SYNC,
    )  # fmt: skip
    assert code == 0, err
    code, said, _ = _main(capsys, "verify", out, "--against", str(tmp_path / "src.zarr"), "--full")
    assert code == 0, said
    assert "nan instead of nan" not in said and "chunks compared" in said
    # x = 0 is NaN and x = 4 a number, in a 2 x 2 x 2 block without NaN at level 1
    for name, x, value in (("nan-to-number", 0, 1.0), ("number-to-nan", 4, np.nan)):
        other = zyx.copy()
        other[0, 0, x] = value
        np.save(tmp_path / f"{name}.npy", other)
        code, said, _ = _main(capsys, "verify", out, "--against", str(tmp_path / f"{name}.npy"),
                              "--full")  # fmt: skip
        assert code == 1, said
        assert "problem: chunk (0, 0, 0) (shard" in said and "1 of 512 voxels differ" in said
        # the level above: its block of x 0..1 holds other NaN still; that of x 4..5 not
        assert ("level 1 chunk (0, 0, 0)" in said) == (x == 4), said


def test_a_dataset_another_tool_wrote_with_nan_verifies_against_its_source(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No manifest (TensorStore wrote the zarr3 array): the base level compared with NaN equal
    to NaN; a number where the source has NaN is still found."""
    zyx = _with_nan()
    np.save(tmp_path / "src.npy", zyx)
    dest = tmp_path / "foreign"
    store = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{dest}/"},
            "metadata": {
                "shape": list(zyx.shape), "data_type": "float32", "fill_value": 0,
                "dimension_names": ["z", "y", "x"],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8, 8]}},
                "codecs": [{"name": "sharding_indexed", "configuration": {
                    "chunk_shape": [4, 4, 4], "codecs": [{"name": "bytes"}],
                    "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}}],
            },
            "create": True,
        }
    ).result()  # fmt: skip
    store.write(zyx).result()
    code, said, _ = _main(capsys, "verify", str(dest), "--against", str(tmp_path / "src.npy"),
                          "--full")  # fmt: skip
    assert code == 0, said
    assert "no manifest: format-level checks only" in said
    other = zyx.copy()
    other[5, 6, 0] = 2.0  # a NaN in the output, a number here
    np.save(tmp_path / "other.npy", other)
    code, said, _ = _main(capsys, "verify", str(dest), "--against", str(tmp_path / "other.npy"),
                          "--full")  # fmt: skip
    assert code == 1 and "1 of 64 voxels differ" in said, said


def test_complex_voxels_with_nan_parts_compare_part_by_part(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A complex voxel NaN in its real part equals the same, but not one whose imaginary part
    differs (NumPy calls both NaN)."""
    zyx = (np.arange(8 * 8 * 8).reshape(8, 8, 8) + 1j).astype(np.complex64)
    zyx[0, 0, 0] = complex(np.nan, 1.0)
    np.save(tmp_path / "src.npy", zyx)
    out = str(tmp_path / "out")
    assert _main(capsys, "convert", str(tmp_path / "src.npy"), out, "--format", "zarr3",
                 "--resolution", "1,1,1", *SYNC)[0] == 0  # fmt: skip
    assert _main(capsys, "verify", out, "--against", str(tmp_path / "src.npy"))[0] == 0
    other = zyx.copy()
    other[0, 0, 0] = complex(np.nan, 2.0)
    np.save(tmp_path / "other.npy", other)
    code, said, _ = _main(capsys, "verify", out, "--against", str(tmp_path / "other.npy"))
    assert code == 1 and "1 of 512 voxels differ" in said, said


# -- 2. the source's fill value, named ----------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "fill", "worded"), [("uint8", 255, "255"), ("float32", float("nan"), "NaN")]
)
def test_absent_chunks_are_said_to_be_written_as_the_sources_fill_value(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    dtype: str,
    fill: float,
    worded: str,
) -> None:
    """A zarr array whose fill value is 255 (or NaN) with chunks never written: the plan, the
    job's summary and verify's note name that value, which is what the output holds there."""
    src = tmp_path / "src.zarr"
    array = zarr.create_array(str(src), shape=(16, 16, 16), chunks=(8, 8, 8), dtype=dtype,
                              fill_value=fill)  # fmt: skip
    array[:8] = 3  # the four chunks of z 8..15 are never written
    out = str(tmp_path / "out")
    common = ["--resolution", "1,1,1", "--chunk-size", "8,8,8"]
    code, said, err = _main(capsys, "plan", str(src), out, *common)
    assert code == 0, err
    assert f"are not stored: written as the source's fill value ({worded})" in said
    assert "fill value (0)" not in said
    code, said, err = _main(capsys, "convert", str(src), out, *common, *SYNC)
    assert code == 0, err
    assert f"4 source chunk(s) were not stored and were written as the source's fill value " \
           f"({worded})" in said  # fmt: skip
    written = ts.open({"driver": "neuroglancer_precomputed",
                       "kvstore": {"driver": "file", "path": out + "/"}}).result()  # fmt: skip
    back = np.asarray(written.read().result())[..., 0]  # x, y, z
    np.testing.assert_array_equal(back[:, :, 8:], np.full((16, 16, 8), fill, dtype=dtype))
    code, said, _ = _main(capsys, "verify", out, "--against", str(src))
    assert code == 0, said
    assert f"as the source's fill value ({worded})" in said


# -- 5. an image pyramid verified at the scale its job read -------------------------------
def _precomputed_pyramid(root: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A precomputed image with three scales (4_4_40, 8_8_80, 16_16_160)."""
    assert _main(capsys, "convert", str(root / "img.npy"), str(root / "pyramid"), "--mips", "2",
                 "--resolution", "4,4,40", "--factor", "2,2,2", "--chunk-size", "8,8,8",
                 *SYNC)[0] == 0  # fmt: skip
    return str(root / "pyramid")


def _ome_zarr_pyramid(root: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> str:
    """An OME-Zarr 0.4 image of two datasets (s0, s1: every axis halved, centred on the
    voxels it summarises), as ome-zarr-py writes it."""
    image = np.load(root / "img.npy")
    path = root / "pyramid.ome.zarr"
    group = zarr.group(store=parse_url(str(path), mode="w", fmt=FormatV04()).store)
    write_multiscale(
        [image, image[::2, ::2, ::2]], group, fmt=FormatV04(),
        axes=[{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"],
        coordinate_transformations=[
            [{"type": "scale", "scale": [40.0 * f, 4.0 * f, 4.0 * f]},
             {"type": "translation", "translation": [20.0 * (f - 1), 2.0 * (f - 1), 2.0 * (f - 1)]}]
            for f in (1, 2)
        ],
        storage_options={"chunks": (8, 8, 8)},
    )  # fmt: skip
    return str(path)


@pytest.mark.parametrize(
    ("make", "coarse", "fine"),
    [(_precomputed_pyramid, "8_8_80", "4_4_40"), (_ome_zarr_pyramid, "s1", "s0")],
    ids=["precomputed", "ome-zarr"],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ome_zarr")
def test_an_image_pyramid_is_verified_at_the_scale_its_job_read(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[pathlib.Path, pytest.CaptureFixture[str]], str],
    coarse: str,
    fine: str,
) -> None:
    """Converted from its second scale and verified without --source-scale: compared at that
    scale (the plan records it). Where the manifest does not say (written before plans
    recorded it), or another scale is named, one problem names the scale and the flag instead
    of a traceback ("grid coordinates out of range")."""
    np.save(tmp_path / "img.npy", (np.arange(32**3).reshape(32, 32, 32) % 251).astype(np.uint8))
    source = make(tmp_path, capsys)
    out = tmp_path / "out"
    assert _main(capsys, "convert", source, str(out), "--source-scale", coarse, "--chunk-size",
                 "8,8,8", *SYNC)[0] == 0  # fmt: skip
    code, said, err = _main(capsys, "verify", str(out), "--against", source)
    assert code == 0 and "chunks compared  8" in said, said + err

    code, said, err = _main(capsys, "verify", str(out), "--against", source, "--source-scale", fine)
    assert code == 1 and err == "", err
    assert "problem: source " in said and f"at its scale {fine} it is 32 x 32 x 32 voxels, the " \
        f"output 16 x 16 x 16 (x,y,z): not what was converted; pass --source-scale {coarse}" \
        in said  # fmt: skip

    old = tmp_path / "old"  # its manifest without the member later versions record
    shutil.copytree(out, old)
    manifest = json.loads((old / MANIFEST).read_text())
    del manifest["plan"]["source_scale"]
    (old / MANIFEST).write_text(json.dumps(manifest))
    code, said, err = _main(capsys, "verify", str(old), "--against", source)
    assert code == 1 and err == "", err
    assert "at its finest scale (no --source-scale) it is 32 x 32 x 32 voxels" in said
    assert "pass --source-scale naming the scale the job read" in said
    assert _main(capsys, "verify", str(old), "--against", source, "--source-scale", coarse)[0] == 0

    (old / MANIFEST).unlink()  # no manifest, no job record: as a dataset another tool wrote
    shutil.rmtree(old / ".shardwright")
    code, said, err = _main(capsys, "verify", str(old), "--against", source)
    assert code == 1 and err == "", err
    assert "no manifest: format-level checks only" in said
    assert "pass --source-scale naming the scale the job read" in said
