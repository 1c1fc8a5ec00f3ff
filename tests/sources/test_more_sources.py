"""Sources besides precomputed: N5 (listed x, y, z), a TensorStore spec (file or text), arrays
handed over in Python (NumPy, Dask, any array-like), zarr arrays with chunks absent (counted,
never silent), zarr v2 codecs that cannot be read (one line), and TIFF stacks with a gap in
their numbering. Each converts exactly, read back by TensorStore, or is refused with a reason."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import dask.array as da
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import tifffile
import zarr

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import SourceError
from shardwright.sources import open_source
from shardwright.sources.missing import MissingChunksError
from tests.support import volumes

ZYX = (12, 20, 28)  # z, y, x
RUN: dict[str, Any] = dict(scheduler="sync", progress=False, chunk_size=(16, 16, 8))


def _output_zyx(dest: pathlib.Path) -> np.ndarray:
    """A single-channel precomputed output as TensorStore reads it, C-order z, y, x."""
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}
    xyzc = np.asarray(ts.open(spec).result().translate_to[0, 0, 0, 0].read().result())
    return np.ascontiguousarray(xyzc[..., 0].transpose(2, 1, 0))


def _manifest(dest: pathlib.Path) -> dict[str, Any]:
    return dict(json.loads((dest / MANIFEST_KEY).read_text()))


# --- N5 ---------------------------------------------------------------------------------------


def _write_n5(path: pathlib.Path, xyz: np.ndarray, attributes: dict[str, Any]) -> None:
    """An N5 dataset as Java tools write it: dimensions listed x, y, z."""
    store = ts.open(
        {
            "driver": "n5",
            "kvstore": f"file://{path}/",
            "metadata": {
                "dimensions": list(xyz.shape),
                "blockSize": [16, 8, 4],
                "dataType": str(xyz.dtype),
                "compression": {"type": "gzip"},
            },
            "create": True,
        }
    ).result()
    store.write(xyz).result()
    meta = json.loads((path / "attributes.json").read_text())
    (path / "attributes.json").write_text(json.dumps({**meta, **attributes}))


def test_n5_dataset_and_multiscale_group(tmp_path: pathlib.Path) -> None:
    zyx = volumes.noise(ZYX, seed=4, high=60000, dtype="uint16")
    xyz = np.ascontiguousarray(zyx.transpose(2, 1, 0))
    _write_n5(tmp_path / "vol.n5" / "s0", xyz, {"downsamplingFactors": [1, 1, 1]})
    _write_n5(tmp_path / "vol.n5" / "s1", np.ascontiguousarray(xyz[::2, ::2]),
              {"downsamplingFactors": [2, 2, 1]})  # fmt: skip
    (tmp_path / "vol.n5" / "attributes.json").write_text(
        json.dumps(
            {"n5": "2.5.1", "pixelResolution": {"unit": "um", "dimensions": [0.004, 0.004, 0.04]}}
        )  # fmt: skip
    )
    source = open_source(str(tmp_path / "vol.n5"))
    assert source.axes == "xyz" and source.shape_xyz == (28, 20, 12)
    assert source.hints.resolution == pytest.approx((4.0, 4.0, 40.0))
    api.convert(str(tmp_path / "vol.n5"), str(tmp_path / "out"), **RUN)
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), zyx)
    coarse = open_source(str(tmp_path / "vol.n5"), scale_key="s1")
    assert coarse.shape_xyz == (14, 10, 12)
    assert coarse.hints.resolution == pytest.approx((8.0, 8.0, 40.0))
    # the group's own pyramid lends its step (s0 -> s1; the coarsest, s1, the one before it)
    assert source.hints.pyramid_factor == coarse.hints.pyramid_factor == (2, 2, 1)
    plan = api.plan(str(tmp_path / "vol.n5"), str(tmp_path / "levels"), mips=1)
    assert plan.pyramid is not None and plan.pyramid.steps == ((2, 2, 1),)
    assert "factors as the source's own pyramid: its N5 attributes" in plan.report()
    group = json.loads((tmp_path / "vol.n5" / "attributes.json").read_text())
    (tmp_path / "vol.n5" / "attributes.json").write_text(  # n5-viewer's list of every scale's
        json.dumps({**group, "scales": [[1, 1, 1], [1, 2, 2]]}))  # fmt: skip
    assert open_source(str(tmp_path / "vol.n5")).hints.pyramid_factor == (1, 2, 2)
    # A dataset named directly, with neuroglancer's resolution/units attributes.
    _write_n5(tmp_path / "plain.n5", xyz, {"resolution": [5, 6, 7], "units": ["nm"] * 3})
    plain = open_source(str(tmp_path / "plain.n5"))
    assert plain.hints.resolution == (5.0, 6.0, 7.0)
    np.testing.assert_array_equal(plain.read((0, 0, 0), plain.shape_xyz)[..., 0], xyz)


def test_n5_absent_blocks_are_counted(tmp_path: pathlib.Path) -> None:
    xyz = np.ones((28, 20, 12), np.uint8)
    xyz[:16, :8, :4] = 0  # one whole block of the fill value: TensorStore does not store it
    _write_n5(tmp_path / "vol.n5", xyz, {})
    assert not (tmp_path / "vol.n5" / "0" / "0" / "0").exists()
    api.convert(str(tmp_path / "vol.n5"), str(tmp_path / "out"), **RUN)
    assert _manifest(tmp_path / "out")["totals"]["source_chunks_missing"] == 1
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), xyz.transpose(2, 1, 0))


# --- a TensorStore spec -----------------------------------------------------------------------


def test_tensorstore_spec_file_and_text(tmp_path: pathlib.Path) -> None:
    zyx = volumes.noise((20, 24, 30), seed=5)
    array = zarr.create_array(str(tmp_path / "big.zarr"), shape=zyx.shape, chunks=(8, 8, 8),
                              dtype="uint8", dimension_names=["z", "y", "x"])  # fmt: skip
    array[:] = zyx
    # A sub-box through an index transform, which no other source kind can name.
    spec = {
        "driver": "zarr3",
        "kvstore": f"file://{tmp_path}/big.zarr/",
        "transform": {
            "input_inclusive_min": [0, 0, 0],
            "input_exclusive_max": [12, 20, 28],
            "input_labels": ["z", "y", "x"],
            "output": [{"input_dimension": i, "offset": o} for i, o in enumerate((4, 2, 1))],
        },
    }
    (tmp_path / "sub.json").write_text(json.dumps(spec))
    api.convert(str(tmp_path / "sub.json"), str(tmp_path / "out"), **RUN)
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), zyx[4:16, 2:22, 1:29])
    inline = open_source(json.dumps({"driver": "zarr3", "kvstore": f"file://{tmp_path}/big.zarr/"}))
    assert inline.axes == "zyx"
    np.testing.assert_array_equal(inline.read_native((0, 0, 0), (30, 24, 20)), zyx)
    # The data a spec names is where no destination may go.
    with pytest.raises(ValueError, match="lies inside the source"):
        api.convert(str(tmp_path / "sub.json"), str(tmp_path / "big.zarr" / "out"), **RUN)
    with pytest.raises(SourceError, match="not a TensorStore spec"):
        open_source('{"kvstore": "file:///x/"}')


# --- arrays in memory -------------------------------------------------------------------------


class _ArrayLike:
    """Shape, dtype and [] only: what an array library of one's own offers."""

    def __init__(self, data: np.ndarray):
        self.shape, self.dtype, self._data = data.shape, data.dtype, data

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._data[key]


@pytest.mark.parametrize("kind", ["numpy", "dask", "array-like"])
def test_arrays_in_memory(tmp_path: pathlib.Path, kind: str) -> None:
    zyx = volumes.cell_labels_zyx((28, 20, 12), "uint32")
    array: Any = {"numpy": zyx, "dask": da.from_array(zyx, chunks=(5, 7, 9)),
                  "array-like": _ArrayLike(zyx)}[kind]  # fmt: skip
    plan = api.plan(array, str(tmp_path / "out"), resolution=(4, 4, 40), chunk_size=(16, 16, 8))
    assert plan.layer_type == "segmentation"
    manifest = api.convert(array, str(tmp_path / "out"), resolution=(4, 4, 40),
                           **RUN)  # fmt: skip
    assert isinstance(manifest, api.Manifest)
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), zyx)
    report = api.verify(str(tmp_path / "out"), array, full=True)
    assert report.ok, report.summary()
    # A resumed job trusts what it can prove of the array: a NumPy or Dask array's content;
    # an array-like proves nothing, so its resume is refused.
    if kind == "array-like":
        with pytest.raises(ValueError, match="differs from the one that wrote it"):
            api.convert(array, str(tmp_path / "out"), resolution=(4, 4, 40), resume=True, **RUN)
    else:
        again = api.convert(array, str(tmp_path / "out"), resolution=(4, 4, 40), resume=True,
                            **RUN)  # fmt: skip
        assert isinstance(again, api.Manifest)
        assert again.totals.resumed_shards == again.totals.shards > 1


def test_what_is_not_an_array_is_refused() -> None:
    with pytest.raises(SourceError, match="a dict is not an array"):
        open_source({"shape": 1})  # type: ignore[arg-type]
    with pytest.raises(SourceError, match="not an image"):
        open_source(np.zeros(4))


# --- zarr: absent chunks counted, codecs named ------------------------------------------------


def test_zarr_absent_chunks_are_counted_and_said(tmp_path: pathlib.Path) -> None:
    zyx = volumes.noise((16, 32, 32), seed=6, high=200) + 1
    zyx[8:, 16:, 16:] = 0  # zarr-python stores no chunk that is all fill value
    array = zarr.create_array(str(tmp_path / "v.zarr"), shape=zyx.shape, chunks=(8, 16, 16),
                              dtype="uint8")  # fmt: skip
    array[:] = zyx
    assert not (tmp_path / "v.zarr" / "c" / "1" / "1" / "1").exists()
    plan = api.plan(str(tmp_path / "v.zarr"), str(tmp_path / "out"), chunk_size=(16, 16, 8))
    assert plan.describe()["source_chunks_absent_sampled"][0] >= 1  # the sample hits it
    assert "% of sampled source chunks" in plan.report()
    api.convert(str(tmp_path / "v.zarr"), str(tmp_path / "out"), **RUN)
    totals = _manifest(tmp_path / "out")["totals"]
    assert totals["source_chunks_missing"] == 1
    assert totals["source_chunks_missing_examples"] == ["c/1/1/1"]
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), zyx)
    report = api.verify(str(tmp_path / "out"), str(tmp_path / "v.zarr"), full=True)
    assert report.ok and any("c/1/1/1" in note for note in report.notes), report.summary()


def test_zarr_with_nothing_stored_is_no_data(tmp_path: pathlib.Path) -> None:
    zarr.create_array(str(tmp_path / "v.zarr"), shape=(8, 8, 8), chunks=(4, 4, 4), dtype="uint8")
    with pytest.raises(ValueError, match="no data at .*v.zarr: none of the 6 source chunks"):
        api.plan(str(tmp_path / "v.zarr"), str(tmp_path / "out"), chunk_size=(4, 4, 4))
    api.convert(str(tmp_path / "v.zarr"), str(tmp_path / "out"), fill_missing=True,
                **{**RUN, "chunk_size": (4, 4, 4)})  # fmt: skip
    assert _manifest(tmp_path / "out")["totals"]["source_chunks_missing"] == 8


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(filters=[numcodecs.Delta(dtype="uint16")]),
            "zarr v2 filter.s. delta are not supported",
        ),
        (dict(compressors=[numcodecs.LZMA()]), "zarr v2 compressor 'lzma' is not supported"),
    ],
)
def test_zarr_v2_codecs_not_read_are_named(
    tmp_path: pathlib.Path, kwargs: dict[str, Any], message: str
) -> None:
    array = zarr.create_array(str(tmp_path / "v.zarr"), shape=(8, 8, 8), chunks=(4, 4, 4),
                              dtype="uint16", zarr_format=2, **kwargs)  # fmt: skip
    array[:] = 7
    with pytest.raises(SourceError, match=message) as caught:
        open_source(str(tmp_path / "v.zarr"))
    assert "\n" not in str(caught.value) and "tensorstore_spec" not in str(caught.value)


# --- TIFF stacks with a gap -------------------------------------------------------------------


def test_tiff_gap_is_refused_then_filled(tmp_path: pathlib.Path) -> None:
    zyx = volumes.noise((6, 20, 28), seed=8) + 1
    stack = tmp_path / "stack"
    stack.mkdir()
    for z in (0, 1, 2, 4, 5, 6):  # slice 3 was never exported
        tifffile.imwrite(stack / f"em_{z:04d}.tif", zyx[z if z < 3 else z - 1])
    with pytest.raises(MissingChunksError, match=r"skips 1 number\(s\) \(3\) between em_0000"):
        open_source(str(stack))
    api.convert(str(stack), str(tmp_path / "out"), fill_missing=True,
                **{**RUN, "chunk_size": (16, 16, 4)})  # fmt: skip
    expected = np.concatenate([zyx[:3], np.zeros((1, 20, 28), np.uint8), zyx[3:]])
    np.testing.assert_array_equal(_output_zyx(tmp_path / "out"), expected)
    assert _manifest(tmp_path / "out")["totals"]["source_chunks_missing"] == 1
    # Numbers that step by a constant (every other slice exported) have no gap.
    steps = tmp_path / "steps"
    steps.mkdir()
    for z in range(3):
        tifffile.imwrite(steps / f"s{2 * z}.tif", zyx[z])
    assert open_source(str(steps)).shape_xyz == (28, 20, 3)
