"""Sources: every kind, written by its real writer library, read box by box against the numpy
original; hints, axis overrides, pickling, box-only reads and one clear error per bad source."""

from __future__ import annotations

import builtins
import functools
import http.server
import pathlib
import pickle
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import h5py
import numpy as np
import pytest
import tensorstore as ts
import tifffile
import zarr

from shardwright.errors import SourceError
from shardwright.sources import Source, open_source
from tests.support import volumes

X, Y, Z = 37, 29, 11
ZYX = (Z, Y, X)
Box = tuple[tuple[int, int, int], tuple[int, int, int]]


_volume = volumes.full_range


def _xyzc(native: np.ndarray, axes: str) -> np.ndarray:
    """What `read` must return: the native array indexed [x, y, z, c]."""
    out = np.transpose(native, [axes.index(a) for a in "xyzc" if a in axes])
    return out if "c" in axes else out[..., np.newaxis]


def _boxes(shape_xyz: tuple[int, int, int], seed: int = 1) -> list[Box]:
    """The whole volume, corner and edge boxes, a single voxel, an empty box, random boxes."""
    sx, sy, sz = shape_xyz
    corners = [
        ((0, 0, 0), (sx, sy, sz)),
        ((sx - 5, sy - 3, sz - 1), (sx, sy, sz)),
        ((0, sy - 1, 0), (7, sy, sz)),
        ((sx - 1, 0, 3), (sx, 4, 4)),
        ((4, 5, 6), (5, 6, 7)),
        ((3, 3, 3), (3, 8, 9)),
    ]
    boxes: list[Box] = []
    for lo, hi in corners:  # clipped to the volume, so coarse scales get edge boxes too
        a = [max(0, min(v, n)) for v, n in zip(lo, shape_xyz, strict=True)]
        b = [max(v, min(w, n)) for v, w, n in zip(a, hi, shape_xyz, strict=True)]
        boxes.append(((a[0], a[1], a[2]), (b[0], b[1], b[2])))
    rng = np.random.default_rng(seed)
    for _ in range(6):
        a = [int(rng.integers(0, n)) for n in shape_xyz]
        b = [int(rng.integers(v + 1, n + 1)) for v, n in zip(a, shape_xyz, strict=True)]
        boxes.append(((a[0], a[1], a[2]), (b[0], b[1], b[2])))
    return boxes


def _check(source: Source, native: np.ndarray, axes: str, *, f_order: bool = True) -> None:
    """Metadata, then every box through read (x,y,z,c) and read_native, then a pickled copy."""
    xyzc = _xyzc(native, axes)
    assert source.axes == axes
    assert source.shape_xyz == xyzc.shape[:3]
    assert source.num_channels == xyzc.shape[3]
    assert source.dtype == native.dtype.newbyteorder("=")
    for start, stop in _boxes(source.shape_xyz):
        box = tuple(slice(a, b) for a, b in zip(start, stop, strict=True))
        got = source.read(start, stop)
        assert got.dtype == source.dtype and got.shape == xyzc[box].shape
        np.testing.assert_array_equal(got, xyzc[box])
        if f_order:  # the transpose of a C-order native read is precomputed's chunk layout
            assert got.flags.f_contiguous
        by_axis = dict(zip("xyz", box, strict=True))
        native_box = tuple(by_axis.get(a, slice(None)) for a in axes)
        np.testing.assert_array_equal(source.read_native(start, stop), native[native_box])
    # A handle is open now; the pickled copy must drop it and re-open on the "worker".
    again = pickle.loads(pickle.dumps(source))
    start, stop = (1, 2, 3), (source.shape_xyz[0], 9, source.shape_xyz[2])
    np.testing.assert_array_equal(again.read(start, stop), xyzc[1:, 2:9, 3:])


# --- .npy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "uint64", "float32", ">u2"])
def test_npy_default_axes(tmp_path: pathlib.Path, dtype: str) -> None:
    vol = _volume(dtype, ZYX)
    np.save(tmp_path / "v.npy", vol)
    source = open_source(str(tmp_path / "v.npy"))
    _check(source, vol, "zyx", f_order=False)
    if np.dtype(dtype).isnative:  # a box is a view of the map: the engine makes the only copy
        block = source.read((1, 2, 3), (9, 10, 11))
        assert not block.flags.owndata and not block.flags.writeable
    channels = _volume(dtype, (3, *ZYX), seed=2)
    np.save(tmp_path / "c.npy", channels)
    _check(open_source(f"file://{tmp_path / 'c.npy'}"), channels, "czyx", f_order=False)


def _resident_file_bytes() -> int:
    """This process's resident pages of mapped files (Linux's RssFile)."""
    status = pathlib.Path("/proc/self/status").read_text()
    return (
        int(next(line for line in status.splitlines() if line.startswith("RssFile:")).split()[1])
        * 1024
    )


@pytest.mark.skipif(not pathlib.Path("/proc/self/status").exists(), reason="reads Linux's RssFile")
def test_npy_reads_leave_no_pages_resident(tmp_path: pathlib.Path) -> None:
    """Each read maps the file for itself, so once the engine drops a box its pages leave the
    process's resident memory. A map kept for a worker's life held every page it had touched,
    which Dask counts against the worker's limit: the workers of a 32 GiB job were restarted."""
    path = tmp_path / "v.npy"
    volume = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(256, 512, 512))
    volume[:] = 3
    volume.flush()
    del volume
    source = open_source(str(path))
    before = _resident_file_bytes()
    total = 0
    for z in range(0, 256, 64):
        box = source.read((0, 0, z), (512, 512, z + 64))
        total += int(box.sum(dtype=np.int64))  # every page of the box read
        del box
    assert total == 3 * 256 * 512 * 512
    assert _resident_file_bytes() - before < 8 << 20  # the 64 MiB read, none of it kept


def test_npy_reads_from_many_threads_at_once(tmp_path: pathlib.Path) -> None:
    """A planner samples a source on threads: each read maps the file without parsing its
    header again (NumPy parses it with `ast`, which CPython 3.11 cannot run from several
    threads at once: "AST constructor recursion depth mismatch" in a loaded test run)."""
    vol = _volume("uint16", ZYX)
    np.save(tmp_path / "v.npy", vol)
    source = open_source(str(tmp_path / "v.npy"))
    expected = vol[2:9, 1:7, 3:11].transpose(2, 1, 0)

    def read(_: int) -> bool:
        return all(
            np.array_equal(source.read((3, 1, 2), (11, 7, 9))[..., 0], expected) for _ in range(50)
        )

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(16)))


def test_npy_axes_overrides(tmp_path: pathlib.Path) -> None:
    xyz = _volume("uint16", (X, Y, Z))
    np.save(tmp_path / "xyz.npy", xyz)
    _check(open_source(str(tmp_path / "xyz.npy"), axes="xyz"), xyz, "xyz", f_order=False)
    zyxc = _volume("float32", (*ZYX, 3))
    np.save(tmp_path / "zyxc.npy", zyxc)
    _check(open_source(str(tmp_path / "zyxc.npy"), axes="zyxc"), zyxc, "zyxc", f_order=False)
    yxzc = _volume("uint8", (Y, X, Z, 2))
    np.save(tmp_path / "yxzc.npy", yxzc)
    _check(open_source(str(tmp_path / "yxzc.npy"), axes="yxzc"), yxzc, "yxzc", f_order=False)


def test_npy_file_in_fortran_order(tmp_path: pathlib.Path) -> None:
    vol = np.asfortranarray(_volume("int16", ZYX))
    np.save(tmp_path / "f.npy", vol)
    _check(open_source(str(tmp_path / "f.npy")), vol, "zyx", f_order=False)


# --- zarr -----------------------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("dtype", ["uint64", "float32"])
def test_zarr_arrays(tmp_path: pathlib.Path, zarr_format: Literal[2, 3], dtype: str) -> None:
    vol = _volume(dtype, ZYX)
    arr = zarr.create_array(
        str(tmp_path / "a.zarr"),
        shape=vol.shape,
        chunks=(4, 8, 16),
        dtype=vol.dtype,
        zarr_format=zarr_format,  # fmt: skip
    )
    arr[...] = vol
    _check(open_source(str(tmp_path / "a.zarr")), vol, "zyx")
    channels = _volume(dtype, (3, *ZYX), seed=3)
    arr = zarr.create_array(
        str(tmp_path / "c.zarr"),
        shape=channels.shape,
        chunks=(1, 4, 8, 16),
        dtype=channels.dtype,
        zarr_format=zarr_format,
        compressors=None,  # fmt: skip
    )
    arr[...] = channels
    _check(open_source(f"file://{tmp_path / 'c.zarr'}"), channels, "czyx")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_dimension_names_give_the_axes(
    tmp_path: pathlib.Path, zarr_format: Literal[2, 3]
) -> None:
    vol = _volume("uint16", (*ZYX, 3))
    path = str(tmp_path / "a.zarr")
    names = ["z", "y", "x", "c"]
    arr = zarr.create_array(
        path,
        shape=vol.shape,
        chunks=(4, 8, 8, 3),
        dtype=vol.dtype,
        zarr_format=zarr_format,
        dimension_names=names if zarr_format == 3 else None,  # fmt: skip
    )
    arr[...] = vol
    if zarr_format == 2:
        arr.attrs["_ARRAY_DIMENSIONS"] = names
    _check(open_source(path), vol, "zyxc", f_order=False)
    # axes= wins over the names (here: a deliberately different labelling).
    _check(open_source(path, axes="yxzc"), vol, "yxzc", f_order=False)


def test_zarr_v3_sharded_array_and_unusable_names(tmp_path: pathlib.Path) -> None:
    vol = _volume("uint32", ZYX)
    arr = zarr.create_array(
        str(tmp_path / "s.zarr"),
        shape=vol.shape,
        chunks=(4, 8, 8),
        shards=(8, 16, 16),
        dtype=vol.dtype,
        dimension_names=["depth", "row", "col"],  # fmt: skip
    )
    arr[...] = vol
    _check(open_source(str(tmp_path / "s.zarr")), vol, "zyx")  # names not x/y/z: default


def _ome_group(
    path: str, zarr_format: Literal[2, 3], vol: np.ndarray, multiscales: dict[str, Any]
) -> None:
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    for level, data in (("s0", vol), ("s1", vol[..., ::2, ::2, ::2])):
        arr = group.create_array(level, shape=data.shape, chunks=data.shape, dtype=data.dtype)
        arr[...] = data
    if zarr_format == 3:
        group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscales]}
    else:
        group.attrs["multiscales"] = [{"version": "0.4", **multiscales}]


def _datasets(scales: list[list[float]]) -> list[dict[str, Any]]:
    return [
        {"path": f"s{i}", "coordinateTransformations": [{"type": "scale", "scale": s}]}
        for i, s in enumerate(scales)
    ]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_ome_zarr_group_dataset_and_resolution(
    tmp_path: pathlib.Path, zarr_format: Literal[2, 3]
) -> None:
    vol = _volume("uint8", ZYX)
    path = str(tmp_path / "ome.zarr")
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"]
    _ome_group(
        path, zarr_format, vol, {"axes": axes, "datasets": _datasets([[40, 8, 8], [80, 16, 16]])}
    )
    source = open_source(path)
    assert source.hints.resolution == (8.0, 8.0, 40.0)
    _check(source, vol, "zyx")
    coarse = open_source(path, scale_key="s1")
    assert coarse.hints.resolution == (16.0, 16.0, 80.0)
    _check(coarse, vol[::2, ::2, ::2], "zyx")
    with pytest.raises(SourceError, match="no multiscale dataset 's7'; datasets are s0, s1"):
        open_source(path, scale_key="s7")


def test_ome_zarr_channels_units_and_global_scale(tmp_path: pathlib.Path) -> None:
    vol = _volume("uint16", (2, *ZYX))
    path = str(tmp_path / "ome.zarr")
    axes = [{"name": "ch", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"
    ]
    multiscales = {
        "axes": axes,
        "datasets": _datasets([[1, 0.04, 0.008, 0.004], [1, 0.08, 0.016, 0.008]]),
        "coordinateTransformations": [{"type": "scale", "scale": [1, 2, 1, 1]}],
    }
    _ome_group(path, 3, vol, multiscales)
    source = open_source(path)
    assert source.hints.resolution == pytest.approx((4.0, 8.0, 80.0))
    _check(source, vol, "czyx")
    # A unit that is no length leaves the resolution unknown instead of guessing.
    multiscales["axes"] = [axes[0]] + [
        {"name": n, "type": "space", "unit": "second"} for n in "zyx"
    ]
    _ome_group(path, 3, vol, multiscales)
    assert open_source(path).hints.resolution is None


# --- precomputed ----------------------------------------------------------------------------


def _write_precomputed(
    path: pathlib.Path, xyzc: np.ndarray, layer_type: str, offset: list[int], sharded: bool
) -> None:
    scale: dict[str, Any] = {
        "size": list(xyzc.shape[:3]),
        "resolution": [4, 4, 30],
        "chunk_size": [16, 8, 4],
        "encoding": "raw",
        "voxel_offset": offset,
    }
    if sharded:
        scale["sharding"] = {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 2,
            "hash": "identity",
            "minishard_bits": 1,
            "shard_bits": 3,
            "minishard_index_encoding": "gzip",
        }
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": f"{path}/"},
            "multiscale_metadata": {
                "type": layer_type,
                "data_type": str(xyzc.dtype),
                "num_channels": xyzc.shape[3],
            },
            "scale_metadata": scale,
            "create": True,
        }
    ).result()
    store[ts.d[:].translate_to[0]].write(xyzc).result()


@pytest.mark.parametrize("sharded", [False, True])
def test_precomputed_segmentation_with_offset(tmp_path: pathlib.Path, sharded: bool) -> None:
    xyzc = _volume("uint64", (X, Y, Z, 1))
    _write_precomputed(tmp_path, xyzc, "segmentation", [100, -20, 7], sharded)
    source = open_source(str(tmp_path))
    assert source.hints.voxel_offset == (100, -20, 7)
    assert source.hints.resolution == (4.0, 4.0, 30.0)
    assert source.hints.layer_type == "segmentation"
    _check(source, xyzc, "xyzc")  # native order is x,y,z,c, read straight into F order
    np.testing.assert_array_equal(source.read_native((0, 0, 0), (2, 2, 2)), xyzc[:2, :2, :2])


def test_precomputed_image_channels_and_scales(tmp_path: pathlib.Path) -> None:
    xyzc = _volume("float32", (X, Y, Z, 3))
    _write_precomputed(tmp_path, xyzc, "image", [0, 0, 0], sharded=True)
    coarse = np.ascontiguousarray(xyzc[::2, ::2])
    ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": f"{tmp_path}/"},
            "scale_metadata": {
                "size": list(coarse.shape[:3]),
                "resolution": [8, 8, 30],
                "chunk_size": [8, 8, 8],
                "encoding": "raw",
            },
            "create": True,
        }
    ).result().write(coarse).result()
    source = open_source(f"file://{tmp_path}")
    assert source.hints.layer_type == "image" and source.hints.voxel_offset == (0, 0, 0)
    _check(source, xyzc, "xyzc")
    _check(open_source(str(tmp_path), scale_key="8_8_30"), coarse, "xyzc")
    with pytest.raises(SourceError, match="no scale 'nope'; scales are 4_4_30, 8_8_30"):
        open_source(str(tmp_path), scale_key="nope")
    with pytest.raises(SourceError, match="precomputed volume is x,y,z,c"):
        open_source(str(tmp_path), axes="zyxc")
    # The info file itself names the volume too.
    assert open_source(str(tmp_path / "info")).shape_xyz == (X, Y, Z)


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that honours byte ranges, as GCS/S3 https endpoints do."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else every keep-alive response waits out a delayed ACK

    def do_GET(self) -> None:
        wanted = self.headers.get("Range", "")
        path = pathlib.Path(self.translate_path(self.path))
        if not wanted.startswith("bytes=") or not path.is_file():
            return super().do_GET()
        data = path.read_bytes()
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        if first:
            start, stop = int(first), min(len(data), int(last) + 1 if last else len(data))
        else:
            start, stop = max(0, len(data) - int(last)), len(data)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        self.wfile.write(data[start:stop])

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_root(tmp_path: pathlib.Path) -> Iterator[tuple[pathlib.Path, str]]:
    """A local HTTP server over tmp_path: precomputed volumes are often public https URLs."""
    handler = functools.partial(_RangeHandler, directory=str(tmp_path))
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"request_queue_size": 128})
    server = server_class(("127.0.0.1", 0), handler)  # a deep backlog: TensorStore opens many
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("sharded", [False, True])
def test_precomputed_over_http(http_root: tuple[pathlib.Path, str], sharded: bool) -> None:
    root, base = http_root
    xyzc = _volume("uint8", (X, Y, Z, 1))
    _write_precomputed(root / "vol", xyzc, "image", [1, 2, 3], sharded=sharded)
    _check(open_source(f"{base}/vol"), xyzc, "xyzc")


# --- TIFF -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, kwargs",
    [
        ("uint16", {}),  # contiguous: memory-mapped
        ("uint64", {}),
        (">f4", {"byteorder": ">"}),  # big-endian file, native-order blocks
        ("uint8", {"compression": "zlib", "rowsperstrip": 4}),  # decoded strip by strip
        ("float32", {"compression": "zlib", "tile": (16, 16)}),  # decoded tile by tile
    ],
)
def test_tiff_stack(tmp_path: pathlib.Path, dtype: str, kwargs: dict[str, Any]) -> None:
    vol = _volume(dtype, ZYX)
    tifffile.imwrite(tmp_path / "stack.tif", vol, **kwargs)
    _check(open_source(str(tmp_path / "stack.tif")), vol, "zyx")


def test_tiff_stack_channels_and_plain_pages(tmp_path: pathlib.Path) -> None:
    rgb = _volume("uint8", (*ZYX, 3))
    tifffile.imwrite(tmp_path / "rgb.tiff", rgb, photometric="rgb", compression="zlib")
    _check(open_source(str(tmp_path / "rgb.tiff")), rgb, "zyxc", f_order=False)
    planar = np.ascontiguousarray(np.moveaxis(rgb, -1, 1))  # z, c, y, x
    tifffile.imwrite(tmp_path / "planar.tif", planar, photometric="rgb", planarconfig="separate")
    _check(open_source(str(tmp_path / "planar.tif")), planar, "zcyx", f_order=False)
    # Channel-major pages carry no axis names: axes= says what they are.
    czyx = _volume("uint16", (2, *ZYX))
    tifffile.imwrite(tmp_path / "czyx.tif", czyx, photometric="minisblack")
    _check(open_source(str(tmp_path / "czyx.tif"), axes="czyx"), czyx, "czyx")
    # Pages appended one by one without metadata, as many acquisition tools write them.
    vol = _volume("uint16", ZYX)
    for plane in vol:
        tifffile.imwrite(tmp_path / "pages.tif", plane, append=True, metadata=None)
    _check(open_source(str(tmp_path / "pages.tif")), vol, "zyx")


def _write_slices(
    folder: pathlib.Path, vol: np.ndarray, name: str = "slice_{}.tif", **kwargs: Any
) -> None:
    folder.mkdir()
    for z, plane in enumerate(vol):
        tifffile.imwrite(folder / name.format(z), plane, **kwargs)


def test_tiff_slices_in_natural_order(tmp_path: pathlib.Path) -> None:
    vol = _volume("uint16", ZYX)  # 11 slices: slice_2 must come before slice_10
    _write_slices(tmp_path / "slices", vol)
    (tmp_path / "slices" / "notes.txt").write_text("not a slice")
    source = open_source(str(tmp_path / "slices"))
    assert source.axes == "zyx"
    _check(source, vol, "zyx")
    _check(open_source(str(tmp_path / "slices" / "slice_*.tif")), vol, "zyx")


@pytest.mark.parametrize("dtype", ["uint64", "float32"])
def test_tiff_slices_compressed_and_channels(tmp_path: pathlib.Path, dtype: str) -> None:
    vol = _volume(dtype, ZYX)
    _write_slices(tmp_path / "gray", vol, "s{}.TIFF", compression="zlib", tile=(16, 16))
    _check(open_source(str(tmp_path / "gray")), vol, "zyx")
    rgb = _volume("uint8", (*ZYX, 3))
    _write_slices(tmp_path / "rgb", rgb, photometric="rgb", compression="zlib", rowsperstrip=5)
    _check(open_source(f"file://{tmp_path / 'rgb'}"), rgb, "zyxc", f_order=False)


def test_tiff_slices_read_opens_only_the_slices_in_range(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file open in the process is counted, whatever library does it."""
    vol = _volume("uint8", ZYX)
    _write_slices(tmp_path / "plain", vol)
    _write_slices(tmp_path / "zlib", vol, compression="zlib")
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    for folder in ("plain", "zlib"):  # memory-mapped slices, and slices decoded by strip
        source = open_source(str(tmp_path / folder))
        opened.clear()
        with monkeypatch.context() as patch:
            patch.setattr(builtins, "open", counting_open)
            block = source.read((2, 3, 4), (30, 20, 7))
        np.testing.assert_array_equal(block[..., 0], vol[4:7, 3:20, 2:30].T)
        names = sorted({pathlib.Path(p).name for p in opened if folder in p})
        assert names == ["slice_4.tif", "slice_5.tif", "slice_6.tif"], (folder, opened)


# --- HDF5 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint64", "float32"])
def test_hdf5_datasets(tmp_path: pathlib.Path, dtype: str) -> None:
    vol = _volume(dtype, ZYX)
    channels = _volume(dtype, (3, *ZYX), seed=4)
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("a/b", data=vol, chunks=(4, 8, 8), compression="gzip")
        f.create_dataset("c", data=channels)  # contiguous, no chunks
    _check(open_source(f"{tmp_path / 'v.h5'}#/a/b"), vol, "zyx")
    _check(open_source(f"file://{tmp_path / 'v.h5'}#c"), channels, "czyx")
    xyz = np.ascontiguousarray(vol.T)
    zyxc = np.ascontiguousarray(np.moveaxis(channels, 0, -1))
    with h5py.File(tmp_path / "x.hdf5", "w") as f:
        f.create_dataset("xyz", data=xyz)
        labelled = f.create_dataset("zyxc", data=zyxc)
        for dim, label in zip(labelled.dims, "zyxc", strict=True):
            dim.label = label
    _check(open_source(f"{tmp_path / 'x.hdf5'}#/xyz", axes="XYZ"), xyz, "xyz", f_order=False)
    _check(open_source(f"{tmp_path / 'x.hdf5'}#/zyxc"), zyxc, "zyxc", f_order=False)


# --- errors ---------------------------------------------------------------------------------


@pytest.fixture
def bad(tmp_path: pathlib.Path) -> pathlib.Path:
    np.save(tmp_path / "v.npy", np.zeros((4, 5, 6), np.uint8))
    np.save(tmp_path / "line.npy", np.zeros(4, np.uint8))
    np.save(tmp_path / "times.npy", np.zeros((3, 1, 2, 4, 5), np.uint8))  # t, c, z, y, x
    np.save(tmp_path / "six.npy", np.zeros((1, 1, 2, 3, 4, 5), np.uint8))
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "garbage.npy").write_bytes(b"not numpy at all")  # read as a pickle by NumPy
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "cut.npy").write_bytes((tmp_path / "v.npy").read_bytes()[:100])
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "readme.md").write_text("no volume here")
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("data", data=np.zeros((2, 3, 4)))
        f.create_group("group")
    (tmp_path / "shapes").mkdir()
    tifffile.imwrite(tmp_path / "shapes" / "a1.tif", np.zeros((4, 4), np.uint8))
    tifffile.imwrite(tmp_path / "shapes" / "a2.tif", np.zeros((5, 4), np.uint8))
    (tmp_path / "dtypes").mkdir()
    tifffile.imwrite(tmp_path / "dtypes" / "b1.tif", np.zeros((4, 4), np.uint8))
    tifffile.imwrite(tmp_path / "dtypes" / "b2.tif", np.zeros((4, 4), np.uint16))
    tifffile.imwrite(
        tmp_path / "4d.tif", np.zeros((2, 3, 8, 8), np.uint8), photometric="minisblack"
    )
    (tmp_path / "stacks").mkdir()
    for name in ("c1.tif", "c2.tif"):
        tifffile.imwrite(
            tmp_path / "stacks" / name, np.zeros((3, 8, 8), np.uint8), photometric="minisblack"
        )
    return tmp_path


ERRORS = [
    ("missing.npy", {}, "missing.npy: source does not exist"),
    ("missing_dir", {}, "missing_dir: source does not exist"),
    ("notes.txt", {}, "notes.txt: unknown source format"),
    ("empty", {}, "empty: unknown source format: the directory is empty"),
    ("other", {}, "other: unknown source format: .*neither a precomputed info.*TIFF slices"),
    ("v.h5", {}, r"v.h5: name the dataset .*v.h5#/path/to/dataset"),
    ("v.h5#/nothing", {}, "no dataset '/nothing' in .*v.h5 .*datasets: /data"),
    ("v.h5#/group", {}, "no dataset '/group' .*a group at that path"),
    ("missing.h5#/data", {}, "HDF5 file .*missing.h5 does not exist"),
    ("shapes", {}, r"slice .*a2.tif is \(5, 4\) uint8, expected \(4, 4\) uint8 like .*a1.tif"),
    ("dtypes", {}, r"slice .*b2.tif is \(4, 4\) uint16, expected \(4, 4\) uint8"),
    ("nomatch_*.tif", {}, "the pattern matches no files"),
    ("4d.tif", {}, r"cannot tell the axes of TIFF layout QQYX \(2, 3, 8, 8\); pass axes"),
    ("stacks", {}, r"slices must be 2-D images .*c1.tif is QYX \(3, 8, 8\)"),
    ("v.npy", {"axes": "xyq"}, "axes 'xyq' are not an axis order .*x and y once each"),
    ("v.npy", {"axes": "xxyz"}, "axes 'xxyz' are not an axis order"),
    ("v.npy", {"axes": "tzx"}, "axes 'tzx' are not an axis order"),
    ("v.npy", {"axes": "czyx"}, "axes 'czyx' name 4 dimensions, the array has 3"),
    ("line.npy", {}, r"a 1-D array \(shape \(4,\)\) is not an image"),
    ("six.npy", {}, "a 6-D array is not a volume .*pass axes"),
    ("times.npy", {}, "its t axis holds 3 time points; a conversion writes one volume"),
    ("v.npy", {"scale_key": "1"}, "a .npy array has no scales"),
    ("garbage.npy", {}, r"not a .npy file \(it does not begin with NumPy's header"),
    ("empty.npy", {}, r"not a .npy file \(it does not begin with NumPy's header"),
    ("cut.npy", {}, r"not a readable .npy array \(EOF: reading array header"),
]


@pytest.mark.parametrize(
    "name, kwargs, message", ERRORS, ids=[f"{e[0]}-{e[2][:20]}" for e in ERRORS]
)
def test_bad_sources_fail_when_opened(
    bad: pathlib.Path, name: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(SourceError, match=message):
        open_source(str(bad / name), **kwargs)


def test_bad_urls_and_boxes(bad: pathlib.Path) -> None:
    with pytest.raises(
        SourceError, match="only zarr, N5 and precomputed sources can be read from s3"
    ):
        open_source("s3://bucket/volume.npy")
    with pytest.raises(SourceError, match="unsupported URL scheme ftp://"):
        open_source("ftp://host/volume")
    source = open_source(str(bad / "v.npy"))
    with pytest.raises(SourceError, match=r"box \(0, 0, 0\)-\(7, 5, 4\) is outside the volume"):
        source.read((0, 0, 0), (7, 5, 4))
    (bad / "a.zarr").mkdir()
    (bad / "a.zarr" / "zarr.json").write_text("{not json")
    with pytest.raises(SourceError, match="zarr.json: not valid JSON"):
        open_source(str(bad / "a.zarr"))


def test_format_sniffed_from_content(bad: pathlib.Path) -> None:
    """A file without a telling extension is recognised by its first bytes."""
    vol = _volume("uint8", ZYX)
    np.save(bad / "volume.npy", vol)
    (bad / "volume.npy").rename(bad / "volume.bin")
    _check(open_source(str(bad / "volume.bin")), vol, "zyx", f_order=False)
    (bad / "v.h5").rename(bad / "v.data")
    with pytest.raises(SourceError, match="an HDF5 file; name the dataset"):
        open_source(str(bad / "v.data"))


def test_pickled_sources_hold_no_handles(tmp_path: pathlib.Path) -> None:
    """Sources cross to workers as paths and specs: small pickles, even after reads."""
    vol = _volume("uint16", ZYX)
    np.save(tmp_path / "v.npy", vol)
    tifffile.imwrite(tmp_path / "z.tif", vol, compression="zlib")
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("v", data=vol)
    zarr.create_array(str(tmp_path / "v.zarr"), data=vol)
    urls = ["v.npy", "z.tif", "v.h5#/v", "v.zarr"]
    for url in urls:
        source = open_source(str(tmp_path / url))
        source.read((0, 0, 0), (X, Y, Z))
        assert len(pickle.dumps(source)) < 4096, url
        assert url in repr(source)
