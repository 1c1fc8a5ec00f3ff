"""Pyramids follow the voxel size: with no `--factor`, anisotropic EM (8 x 8 x 40 nm) is halved
in x and y only until its voxels are near isotropic, then along every axis (each level its own
factor, as Igneous and Neuroglancer's scripts build EM pyramids); a source with a pyramid of its
own lends its factor; the plan says which and why, level by level; `--factor` still decides. A
dataset gaining levels in place takes the same default. Each level, read back by TensorStore and
CloudVolume (precomputed) or zarr-python (zarr3), is tinybrain's reduction of the level below:
Igneous's downsampler, not shardwright's.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr

from shardwright import api
from shardwright.cli import main as cli_main

tinybrain = pytest.importorskip("tinybrain")
CloudVolume = pytest.importorskip("cloudvolume").CloudVolume

RUN: dict[str, Any] = dict(scheduler="sync", progress=False)
CHUNK = (16, 16, 8)
XYZ = (45, 38, 21)  # odd along every axis: partial blocks at the far edges


def _labels() -> np.ndarray:
    """Blocky uint32 labels [x, y, z]: majorities and ties in many 2 x 2 blocks."""
    rng = np.random.default_rng(3)
    blocks = rng.integers(1, 9, (12, 10, 11), dtype=np.uint32)
    return blocks.repeat(4, 0).repeat(4, 1).repeat(2, 2)[: XYZ[0], : XYZ[1], : XYZ[2]]


def _tinybrain(labels: np.ndarray, factor: tuple[int, int, int], count: int) -> list[np.ndarray]:
    """Levels 1..count, each tinybrain's mode reduction of the level below ([x, y, z])."""
    return _tinybrain_steps(labels, [factor] * count)


def _tinybrain_steps(labels: np.ndarray, steps: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """A level per step, each tinybrain's mode reduction of the level below by it."""
    out = [labels]
    for step in steps:
        (level,) = tinybrain.downsample_segmentation(np.asfortranarray(out[-1]), step)
        out.append(np.asarray(level))
    return out[1:]


def _ome(path: pathlib.Path, voxel_zyx: list[float], levels: list[np.ndarray]) -> None:
    """An OME-Zarr 0.5 group (zarr-python, by hand) of `levels` ([x, y, z]), each dataset's
    scale the finest times the level's shrink."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    datasets = []
    for k, level in enumerate(levels):
        array = group.create_array(f"s{k}", shape=level.T.shape, chunks=level.T.shape,
                                   dtype=level.dtype)  # fmt: skip
        array[...] = level.T
        shrink = [a / b for a, b in zip(levels[0].T.shape, level.T.shape, strict=True)]
        scale = [v * round(s) for v, s in zip(voxel_zyx, shrink, strict=True)]
        transforms = [{"type": "scale", "scale": scale}]
        datasets.append({"path": f"s{k}", "coordinateTransformations": transforms})
    group.attrs["ome"] = {"version": "0.5", "multiscales": [{
        "axes": [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"],
        "datasets": datasets,
    }]}  # fmt: skip


def _precomputed_levels(dest: pathlib.Path, count: int) -> list[np.ndarray]:
    """Every level as TensorStore reads it, checked equal to CloudVolume's reading ([x, y, z])."""
    out = []
    for k in range(count):
        spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/",
                "scale_index": k}  # fmt: skip
        via_ts = np.asarray(ts.open(spec).result().read().result())[..., 0]
        via_cv = np.asarray(CloudVolume(f"file://{dest}", mip=k, progress=False)[:, :, :])
        np.testing.assert_array_equal(via_ts, via_cv[..., 0])
        out.append(via_ts)
    return out


def test_anisotropic_em_is_halved_in_x_and_y_then_in_all_by_default(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 x 8 x 40 nm labels, --mips 3 and no factor: levels of 16 x 16 x 40 and 32 x 32 x 40 nm
    (2,2,1, not 16 x 16 x 80), then, near isotropic, 64 x 64 x 80 (2,2,2); the plan saying why
    level by level; each level tinybrain's reduction of the one below by its factor; verify
    recomputes them and agrees."""
    source = tmp_path / "em.ome.zarr"
    labels = _labels()
    _ome(source, [40, 8, 8], [labels])
    dest = tmp_path / "pc"
    args = ["plan", str(source), str(dest), "--mips", "3", "--chunk-size", "16,16,8"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "factors for the voxel size 8 x 8 x 40 nm, downsample mode" in out
    rows = ("8_8_40: 45 x 38 x 21 voxels of 8 x 8 x 40 nm,",
            "16_16_40: 23 x 19 x 21 voxels of 16 x 16 x 40 nm (level 0 by 2 x 2 x 1)",
            "32_32_40: 12 x 10 x 21 voxels of 32 x 32 x 40 nm (level 1 by 2 x 2 x 1)",
            "64_64_80: 6 x 5 x 11 voxels of 64 x 64 x 80 nm (level 2 by 2 x 2 x 2)")  # fmt: skip
    for row in rows:
        assert row in out
    steps = [(2, 2, 1), (2, 2, 1), (2, 2, 2)]
    manifest = api.convert(str(source), str(dest), mips=3, chunk_size=CHUNK, **RUN)
    assert manifest.plan["pyramid"]["factors_xyz"] == [list(s) for s in steps]
    info = json.loads((dest / "info").read_text())
    assert [s["resolution"] for s in info["scales"]] == [
        [8, 8, 40], [16, 16, 40], [32, 32, 40], [64, 64, 80]]  # fmt: skip
    levels = _precomputed_levels(dest, 4)
    np.testing.assert_array_equal(levels[0], labels)
    for got, want in zip(levels[1:], _tinybrain_steps(labels, steps), strict=True):
        np.testing.assert_array_equal(got, want)
    report = api.verify(str(dest), str(source), full=True)
    assert report.ok, report.problems
    given = api.plan(str(source), str(tmp_path / "given"), mips=2, factor=(2, 2, 2))
    assert given.pyramid is not None and given.pyramid.steps == ((2, 2, 2), (2, 2, 2))
    assert "factors as given" in given.report()
    assert given.level_plan(2).resolution == (32, 32, 160)


def test_a_source_pyramid_lends_its_factor(tmp_path: pathlib.Path) -> None:
    """Isotropic 8 nm voxels whose own OME-Zarr pyramid halves x and y only: its factor, not
    the voxel size's 2,2,2, builds the zarr3 pyramid, and the plan names the source's
    pyramid; the levels, read by zarr-python, are tinybrain's at 2,2,1."""
    source = tmp_path / "iso.ome.zarr"
    labels = _labels()
    _ome(source, [8, 8, 8], [labels, *_tinybrain(labels, (2, 2, 1), 1)])
    plan = api.plan(str(source), str(tmp_path / "z3"), format="zarr3", mips=2, chunk_size=CHUNK)
    assert plan.pyramid is not None and plan.pyramid.steps == ((2, 2, 1), (2, 2, 1))
    assert "factors as the source's own pyramid: OME-Zarr 0.5 dataset 's0'" in plan.report()
    api.convert(plan, **RUN)
    group = zarr.open_group(str(tmp_path / "z3"), mode="r")
    levels = [np.asarray(group[str(k)][...]).T for k in range(3)]
    for got, want in zip(levels[1:], _tinybrain(labels, (2, 2, 1), 2), strict=True):
        np.testing.assert_array_equal(got, want)
    (multiscale,) = json.loads((tmp_path / "z3" / "zarr.json").read_text())["attributes"]["ome"][
        "multiscales"
    ]
    scales = [d["coordinateTransformations"][0]["scale"] for d in multiscale["datasets"]]
    assert scales == [[8, 8, 8], [8, 16, 16], [8, 32, 32]]  # z, y, x


def _cloudvolume(path: pathlib.Path, resolutions: list[list[int]]) -> np.ndarray:
    """A CloudVolume segmentation of `_labels()` with a scale per resolution (the coarser
    ones tinybrain's reductions), unsharded, its chunks uncompressed (TensorStore reads no
    CloudFiles `.gz` suffix)."""
    labels = _labels()
    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint32", encoding="raw",
        resolution=resolutions[0], voxel_offset=[0, 0, 0], chunk_size=[16, 16, 8],
        volume_size=list(labels.shape),
    )  # fmt: skip
    volume = CloudVolume(f"file://{path}", info=info, progress=False, compress=False)
    for resolution in resolutions[1:]:
        factor = [c // f for c, f in zip(resolution, resolutions[0], strict=True)]
        volume.add_scale(factor, chunk_size=[16, 16, 8])
    volume.commit_info()
    volume[:, :, :] = labels
    for mip, resolution in enumerate(resolutions[1:], 1):
        factor = tuple(c // f for c, f in zip(resolution, resolutions[0], strict=True))
        (level,) = _tinybrain(labels, factor, 1)  # type: ignore[arg-type]
        CloudVolume(f"file://{path}", mip=mip, progress=False, compress=False)[:, :, :] = level
    return labels


def test_a_precomputed_source_pyramid_lends_its_factor(tmp_path: pathlib.Path) -> None:
    """A CloudVolume dataset at 8,8,40 nm whose own pyramid is 2,2,2 (16,16,80): converted
    from its finest scale, its pyramid takes 2,2,2, not the voxel size's 2,2,1, and says so;
    level 1, read by TensorStore, is tinybrain's at 2,2,2."""
    source = tmp_path / "cv"
    labels = _cloudvolume(source, [[8, 8, 40], [16, 16, 80]])
    plan = api.plan(str(source), str(tmp_path / "out"), mips=1, chunk_size=CHUNK)
    assert plan.pyramid is not None and plan.pyramid.steps == ((2, 2, 2),)
    assert "factors as the source's own pyramid: its info (scale 8_8_40)" in plan.report()
    api.convert(plan, **RUN)
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path / 'out'}",
            "scale_index": 1}  # fmt: skip
    level = np.asarray(ts.open(spec).result().read().result())[..., 0]
    np.testing.assert_array_equal(level, _tinybrain(labels, (2, 2, 2), 1)[0])


@pytest.mark.parametrize(
    "resolutions, added",
    [
        ([[8, 8, 40]], [16, 16, 40]),  # one scale: the voxel size's 2,2,1
        # its own pyramid's 2,2,1, where the voxel size's would halve z alone (16,16,16)
        ([[8, 8, 8], [16, 16, 8]], [32, 32, 8]),
    ],
)
def test_levels_added_in_place_take_the_same_default(
    tmp_path: pathlib.Path, resolutions: list[list[int]], added: list[int]
) -> None:
    """`convert DEST --mips 1` on a CloudVolume segmentation, no factor: the new scale is its
    coarsest reduced by the voxel size's factor, or by its own pyramid's where it has one;
    TensorStore reads it as tinybrain's reduction of that scale."""
    dest = tmp_path / "cv"
    _cloudvolume(dest, resolutions)
    assert cli_main(["convert", str(dest), "--mips", "1", "--scheduler", "sync", "--quiet"]) == 0
    info = json.loads((dest / "info").read_text())
    assert info["scales"][-1]["resolution"] == added
    factor = [a // r for a, r in zip(added, resolutions[-1], strict=True)]
    top = len(resolutions) - 1
    below, new = _precomputed_levels(dest, top + 2)[top:]
    (want,) = _tinybrain(below, tuple(factor), 1)  # type: ignore[arg-type]
    np.testing.assert_array_equal(new, want)
