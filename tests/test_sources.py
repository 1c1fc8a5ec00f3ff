"""Sources: every kind read box by box against the numpy original, hints, pickling, errors."""

from __future__ import annotations

import json
import pathlib
import pickle
from typing import Any

import h5py
import numpy as np
import pytest
import tensorstore as ts
import tifffile
import zarr

from shardwright.sources import SourceError, open_source
from shardwright.sources import tiff as tiff_module

ZYX = (11, 29, 37)
RNG = np.random.default_rng(5)


def _boxes(shape_xyz: tuple[int, int, int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    boxes = [((0, 0, 0), shape_xyz), ((3, 5, 2), (10, 29, 11))]
    for _ in range(4):
        start = tuple(int(RNG.integers(0, n)) for n in shape_xyz)
        stop = tuple(int(RNG.integers(a + 1, n + 1)) for a, n in zip(start, shape_xyz, strict=True))
        boxes.append((start, stop))
    return boxes


def _check_reads(source: Any, xyzc: np.ndarray) -> None:
    assert source.shape_xyz == xyzc.shape[:3]
    assert source.num_channels == xyzc.shape[3]
    for start, stop in _boxes(source.shape_xyz):
        want = xyzc[start[0] : stop[0], start[1] : stop[1], start[2] : stop[2]]
        np.testing.assert_array_equal(source.read(start, stop), want)
    again = pickle.loads(pickle.dumps(source))
    np.testing.assert_array_equal(again.read((0, 0, 0), (5, 5, 5)), xyzc[:5, :5, :5])


def _volume(dtype: str, channels: int = 0) -> np.ndarray:
    shape = (channels, *ZYX) if channels else ZYX
    return (RNG.random(shape) * 200).astype(dtype)


def _xyzc(vol: np.ndarray, axes: str) -> np.ndarray:
    order = [axes.index(a) for a in "xyzc" if a in axes]
    out = np.transpose(vol, order)
    return out if "c" in axes else out[..., None]


@pytest.mark.parametrize("dtype", ["uint8", "uint64", "float32"])
def test_npy_in_default_and_given_axis_orders(tmp_path: pathlib.Path, dtype: str) -> None:
    vol = _volume(dtype)
    np.save(tmp_path / "v.npy", vol)
    source = open_source(str(tmp_path / "v.npy"))
    assert source.axes == "zyx" and source.dtype == np.dtype(dtype)
    _check_reads(source, _xyzc(vol, "zyx"))
    xyz = open_source(str(tmp_path / "v.npy"), axes="xyz")
    assert xyz.shape_xyz == ZYX
    _check_reads(xyz, _xyzc(vol, "xyz"))
    np.save(tmp_path / "c.npy", np.moveaxis(_volume(dtype, 3), 0, -1))
    zyxc = open_source(str(tmp_path / "c.npy"), axes="zyxc")
    _check_reads(zyxc, _xyzc(np.load(tmp_path / "c.npy"), "zyxc"))
    np.testing.assert_array_equal(
        zyxc.read_native((1, 2, 3), (4, 5, 6)), np.load(tmp_path / "c.npy")[3:6, 2:5, 1:4]
    )


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_arrays_and_their_dimension_names(tmp_path: pathlib.Path, zarr_format: int) -> None:
    vol = _volume("uint16", 2)
    path = str(tmp_path / "a.zarr")
    arr = zarr.create_array(
        path,
        shape=vol.shape,
        chunks=(1, 4, 8, 8),
        dtype=vol.dtype,
        zarr_format=zarr_format,
        dimension_names=["c", "z", "y", "x"] if zarr_format == 3 else None,
    )
    arr[...] = vol
    if zarr_format == 2:
        attrs = tmp_path / "a.zarr" / ".zattrs"
        attrs.write_text(json.dumps({"_ARRAY_DIMENSIONS": ["c", "z", "y", "x"]}))
    source = open_source(path)
    assert source.axes == "czyx"
    _check_reads(source, _xyzc(vol, "czyx"))


def test_ome_zarr_group_picks_a_dataset_and_its_resolution(tmp_path: pathlib.Path) -> None:
    vol = _volume("uint8")
    group = zarr.open_group(str(tmp_path / "ome.zarr"), mode="w", zarr_format=3)
    for level, data in (("0", vol), ("1", vol[::2, ::2, ::2])):
        arr = group.create_array(level, shape=data.shape, chunks=(8, 8, 8), dtype=data.dtype)
        arr[...] = data
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"]
    datasets = [
        {"path": p, "coordinateTransformations": [{"type": "scale", "scale": s}]}
        for p, s in (("0", [40, 8, 8]), ("1", [80, 16, 16]))
    ]
    group.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}
    source = open_source(str(tmp_path / "ome.zarr"))
    assert source.hints.resolution == (8.0, 8.0, 40.0)
    _check_reads(source, _xyzc(vol, "zyx"))
    coarse = open_source(str(tmp_path / "ome.zarr"), scale_key="1")
    assert coarse.hints.resolution == (16.0, 16.0, 80.0)
    with pytest.raises(SourceError, match="no multiscale dataset '7'"):
        open_source(str(tmp_path / "ome.zarr"), scale_key="7")


@pytest.mark.parametrize("sharded", [False, True])
def test_precomputed_scales_and_offsets(tmp_path: pathlib.Path, sharded: bool) -> None:
    xyzc = _xyzc(_volume("uint32"), "zyx")
    scale: dict[str, Any] = {
        "size": list(xyzc.shape[:3]),
        "resolution": [4, 4, 30],
        "chunk_size": [16, 16, 8],
        "encoding": "raw",
        "voxel_offset": [100, -20, 7],
    }
    if sharded:
        scale["sharding"] = {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 2,
            "hash": "identity",
            "minishard_bits": 1,
            "shard_bits": 3,
        }
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{tmp_path}/",
            "multiscale_metadata": {
                "type": "segmentation",
                "data_type": "uint32",
                "num_channels": 1,
            },
            "scale_metadata": scale,
            "create": True,
        }
    ).result()
    store.write(xyzc).result()
    source = open_source(str(tmp_path))
    assert source.hints.voxel_offset == (100, -20, 7)
    assert source.hints.resolution == (4.0, 4.0, 30.0)
    assert source.hints.layer_type == "segmentation"
    _check_reads(source, xyzc)
    key = json.loads((tmp_path / "info").read_text())["scales"][0]["key"]
    assert open_source(str(tmp_path), scale_key=key).shape_xyz == xyzc.shape[:3]
    with pytest.raises(SourceError, match="no scale 'nope'"):
        open_source(str(tmp_path), scale_key="nope")


def test_tiff_file_and_slices(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vol = _volume("uint16")
    tifffile.imwrite(tmp_path / "stack.tif", vol)
    _check_reads(open_source(str(tmp_path / "stack.tif")), _xyzc(vol, "zyx"))
    (tmp_path / "slices").mkdir()
    for z, plane in enumerate(vol):
        tifffile.imwrite(tmp_path / "slices" / f"slice_{z}.tif", plane)
    source = open_source(str(tmp_path / "slices"))
    _check_reads(source, _xyzc(vol, "zyx"))  # natural order: slice_2 before slice_10
    _check_reads(open_source(str(tmp_path / "slices" / "slice_*.tif")), _xyzc(vol, "zyx"))
    opened: list[str] = []
    real = tiff_module.tifffile.imread
    monkeypatch.setattr(
        tiff_module.tifffile,
        "imread",
        lambda path, **kw: opened.append(str(path)) or real(path, **kw),
    )
    source.read((0, 0, 4), (5, 5, 7))
    assert sorted(pathlib.Path(p).name for p in opened) == [f"slice_{z}.tif" for z in (4, 5, 6)]


def test_hdf5_dataset(tmp_path: pathlib.Path) -> None:
    vol = _volume("float32")
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("a/b", data=vol, chunks=(4, 8, 8))
    _check_reads(open_source(f"{tmp_path / 'v.h5'}#/a/b"), _xyzc(vol, "zyx"))


def _bad_cases(tmp: pathlib.Path) -> list[tuple[str, str, dict[str, Any]]]:
    np.save(tmp / "v.npy", np.zeros((4, 5, 6), np.uint8))
    np.save(tmp / "flat.npy", np.zeros((4, 5), np.uint8))
    (tmp / "notes.txt").write_text("hello")
    (tmp / "empty").mkdir()
    with h5py.File(tmp / "v.h5", "w") as f:
        f.create_dataset("data", data=np.zeros((2, 3, 4)))
    (tmp / "mixed").mkdir()
    tifffile.imwrite(tmp / "mixed" / "a1.tif", np.zeros((4, 4), np.uint8))
    tifffile.imwrite(tmp / "mixed" / "a2.tif", np.zeros((5, 4), np.uint8))
    return [
        (str(tmp / "missing.npy"), "does not exist", {}),
        (str(tmp / "notes.txt"), "unknown source format", {}),
        (str(tmp / "empty"), "unknown source format", {}),
        (str(tmp / "v.npy"), "permutation of 'xyz'", {"axes": "xyq"}),
        (str(tmp / "v.npy"), "name 4 dimensions", {"axes": "czyx"}),
        (str(tmp / "flat.npy"), "not a volume", {}),
        (str(tmp / "v.h5"), "name the dataset", {}),
        (f"{tmp / 'v.h5'}#/nothing", "no dataset", {}),
        (str(tmp / "nomatch_*.tif"), "matches no files", {}),
    ]


def test_bad_sources_raise_one_clear_error(tmp_path: pathlib.Path) -> None:
    for url, message, kwargs in _bad_cases(tmp_path):
        with pytest.raises(SourceError, match=message):
            open_source(url, **kwargs)


def test_inconsistent_tiff_slices_are_named_when_opened(tmp_path: pathlib.Path) -> None:
    _bad_cases(tmp_path)
    with pytest.raises(SourceError, match="a2.tif: slice is"):
        open_source(str(tmp_path / "mixed"))
