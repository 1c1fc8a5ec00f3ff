"""End-to-end conversions on a real multi-process LocalCluster, read back by TensorStore,
CloudVolume and zarr-python; plus the scheduler modes, the lazy graph and verify."""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess
import sys
import urllib.request
from typing import Any

import h5py
import numpy as np
import ome_zarr_models
import pytest
import tensorstore as ts
import tifffile
import zarr
from cloudvolume import CloudVolume

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import PlanError
from shardwright.jobs.cluster import SMALL_JOB_BYTES, connect, wants_dashboard
from tests.support import volumes

SIZE_XYZ = (45, 38, 21)  # not a multiple of any chunk size used below


_image = functools.partial(volumes.smooth_image_zyx, SIZE_XYZ, noise=4)


def _labels(dtype: str = "uint64") -> np.ndarray:
    x, y, z = SIZE_XYZ
    zz, yy, xx = np.meshgrid(np.arange(z), np.arange(y), np.arange(x), indexing="ij")
    cells = (xx // 7) + 10 * (yy // 9) + 100 * (zz // 5)
    big = np.array(np.iinfo(dtype).max - 1000, dtype=dtype)  # labels near the top of the range
    return np.where(cells % 11 == 0, 0, big - cells.astype(dtype)).astype(dtype)


def _read_precomputed(dest: pathlib.Path) -> list[np.ndarray]:
    """The volume as [x, y, z, c], read by TensorStore and by CloudVolume."""
    via_ts = (
        ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"})
        .result()
        .read()
        .result()
    )
    via_cv = np.asarray(CloudVolume(f"file://{dest}", progress=False)[:, :, :, :])
    return [np.asarray(via_ts), via_cv]


def _as_xyzc(czyx_or_zyx: np.ndarray) -> np.ndarray:
    if czyx_or_zyx.ndim == 3:
        return czyx_or_zyx.T[..., None]
    return np.transpose(czyx_or_zyx, (3, 2, 1, 0))


def _read_zarr3(dest: pathlib.Path) -> list[np.ndarray]:
    """The level array 0/ of an OME-Zarr group, read by TensorStore and (through the group)
    by zarr-python."""
    via_ts = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/0/"}).result().read().result()
    level = zarr.open_group(str(dest), mode="r")["0"]
    assert isinstance(level, zarr.Array)
    return [np.asarray(via_ts), np.asarray(level[...])]


def _check_ome_group(
    dest: pathlib.Path, resolution_xyz: tuple[float, float, float], label: bool = False
) -> None:
    """DEST/zarr.json is an OME-Zarr 0.5 multiscales group over one level array, 0/, valid for
    ome-zarr-models: its axes are the array's (space axes in nanometres), its scale the voxel
    size in that order."""
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(dest), mode="r"))
    group = json.loads((dest / "zarr.json").read_text())
    assert group["zarr_format"] == 3 and group["node_type"] == "group"
    ome = group["attributes"]["ome"]
    assert ome["version"] == "0.5"
    assert ("image-label" in ome) == label
    axes = json.loads((dest / "0" / "zarr.json").read_text())["dimension_names"]
    (multiscale,) = ome["multiscales"]
    assert multiscale["axes"] == [
        {"name": "c", "type": "channel"}
        if a == "c"
        else {"name": a, "type": "space", "unit": "nanometer"}
        for a in axes
    ]
    (dataset,) = multiscale["datasets"]
    assert dataset["path"] == "0"
    voxel = {"c": 1.0, **dict(zip("xyz", resolution_xyz, strict=True))}
    assert dataset["coordinateTransformations"][0] == {
        "type": "scale",
        "scale": [voxel[a] for a in axes],
    }


SMALL = dict(chunk_size=(16, 16, 8), target_shard_bytes=16 * 1024, memory_budget=64 * 1024**2)


# -- sources --------------------------------------------------------------------------------------
def _write_source(kind: str, root: pathlib.Path, vol: np.ndarray) -> str:
    if kind == "npy":
        np.save(root / "vol.npy", vol)
        return str(root / "vol.npy")
    if kind in ("zarr2", "zarr3"):
        path = root / f"vol.{kind}"
        arr = zarr.create_array(
            str(path),
            shape=vol.shape,
            chunks=(8, 16, 16)[-vol.ndim :] if vol.ndim == 3 else (1, 8, 16, 16),
            dtype=vol.dtype,
            zarr_format=2 if kind == "zarr2" else 3,
        )
        arr[...] = vol
        return str(path)
    if kind == "tiff":
        tifffile.imwrite(root / "vol.tif", vol)
        return str(root / "vol.tif")
    if kind == "tiff-slices":
        (root / "slices").mkdir()
        for z, plane in enumerate(vol):
            tifffile.imwrite(root / "slices" / f"s_{z}.tif", plane)
        return str(root / "slices")
    if kind == "hdf5":
        with h5py.File(root / "vol.h5", "w") as f:
            f.create_dataset("em/raw", data=vol, chunks=True)
        return f"{root / 'vol.h5'}#/em/raw"
    if kind == "precomputed":
        xyz = vol.T[..., None]
        store = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": f"file://{root}/pc/",
                "multiscale_metadata": {
                    "type": "image",
                    "data_type": str(vol.dtype),
                    "num_channels": 1,
                },
                "scale_metadata": {
                    "size": list(SIZE_XYZ),
                    "resolution": [4, 4, 30],
                    "chunk_size": [16, 16, 16],
                    "encoding": "raw",
                    "voxel_offset": [0, 0, 0],
                },
                "create": True,
            }
        ).result()
        store.write(xyz).result()
        return str(root / "pc")
    raise AssertionError(kind)


SOURCE_KINDS = ["npy", "zarr2", "zarr3", "tiff", "tiff-slices", "hdf5", "precomputed"]


@pytest.mark.parametrize("kind", SOURCE_KINDS)
@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_every_source_kind_converts_to_both_formats(
    tmp_path: pathlib.Path, client: Any, kind: str, fmt: str
) -> None:
    vol = _image()
    source = _write_source(kind, tmp_path, vol)
    dest = tmp_path / "out"
    manifest = api.convert(source, str(dest), client=client, progress=False, format=fmt, **SMALL)
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.shards > 1
    if fmt == "precomputed":
        for got in _read_precomputed(dest):
            np.testing.assert_array_equal(got, _as_xyzc(vol))
    else:
        # A precomputed source is x,y,z,c: zarr output keeps its space axes' order (x, y, z),
        # without an axis for its single channel.
        want = vol.T if kind == "precomputed" else vol
        for got in _read_zarr3(dest):
            np.testing.assert_array_equal(got, want)
        _check_ome_group(dest, (4, 4, 30) if kind == "precomputed" else (1, 1, 1))
    assert api.verify(str(dest), source, full=True).ok


ENCODING_CASES = [
    # name, volume, options
    ("raw-none", lambda: _image("uint16"), dict(compression="none")),
    ("raw-gzip-3ch", lambda: _image("uint8", 3), dict(compression="gzip")),
    ("float32", lambda: _image("float32"), dict()),
    ("cseg-uint64", _labels, dict(encoding="compressed_segmentation")),
    (
        "cseg-uint32",
        lambda: _labels("uint32"),
        dict(encoding="compressed_segmentation", compressed_segmentation_block_size=(4, 8, 2)),
    ),
    ("png", _image, dict(encoding="png")),
    ("jpeg", _image, dict(encoding="jpeg", jpeg_quality=95)),
    (
        "murmurhash",
        _labels,
        dict(
            encoding="compressed_segmentation",
            hash="murmurhash3_x86_128",
            minishard_bits=2,
            shard_bits=3,
        ),
    ),
    ("explicit-identity-bits", _image, dict(preshift_bits=2, minishard_bits=1, shard_bits=5)),
]


@pytest.mark.parametrize("case", ENCODING_CASES, ids=[c[0] for c in ENCODING_CASES])
def test_every_encoding_and_sharding(tmp_path: pathlib.Path, client: Any, case: tuple) -> None:
    name, make, options = case
    vol = make()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    source = str(tmp_path / "vol.npy")
    api.convert(source, str(dest), client=client, progress=False, **{**SMALL, **options})
    info = json.loads((dest / "info").read_text())
    spec = info["scales"][0]["sharding"]
    if "hash" in options:
        assert spec["hash"] == options["hash"] and spec["shard_bits"] == 3
    for got in _read_precomputed(dest):
        if name == "jpeg":
            assert np.abs(got.astype(int) - _as_xyzc(vol).astype(int)).mean() < 3
        else:
            np.testing.assert_array_equal(got, _as_xyzc(vol))
    assert api.verify(str(dest), source, full=True).ok


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd", "blosc"])
def test_zarr3_compressions_and_channels(
    tmp_path: pathlib.Path, client: Any, compression: str
) -> None:
    vol = _image("uint16", 2)
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out.zarr"
    api.convert(
        str(tmp_path / "vol.npy"),
        str(dest),
        client=client,
        progress=False,
        format="zarr3",
        compression=compression,
        resolution=(4, 5, 40),
        **SMALL,
    )
    meta = json.loads((dest / "0" / "zarr.json").read_text())
    assert meta["node_type"] == "array"
    assert meta["dimension_names"] == ["c", "z", "y", "x"]
    _check_ome_group(dest, (4, 5, 40))  # scale [1, 40, 5, 4]: c, z, y, x
    for got in _read_zarr3(dest):
        np.testing.assert_array_equal(got, vol)


def test_zarr3_omits_all_fill_chunks_and_shards(tmp_path: pathlib.Path) -> None:
    vol = np.zeros(SIZE_XYZ[::-1], dtype=np.uint8)
    vol[:4, :4, :4] = 7
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out.zarr"
    manifest = api.convert(
        str(tmp_path / "vol.npy"),
        str(dest),
        scheduler="sync",
        progress=False,
        format="zarr3",
        **SMALL,
    )
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.shards == 1 and manifest.totals.chunks == 1
    assert manifest.totals.empty_shards_skipped > 0
    for got in _read_zarr3(dest):
        np.testing.assert_array_equal(got, vol)


def _zarr3_shards(root: pathlib.Path) -> dict[str, bytes]:
    """The shard objects of the zarr3 array at `root` (under c/), by key."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in (root / "c").rglob("*")
            if p.is_file()}  # fmt: skip


def test_zarr3_array_layout_writes_one_bare_array(tmp_path: pathlib.Path) -> None:
    """`zarr_layout="array"`: the level array itself at DEST (no group, no 0/), the same
    metadata and shard bytes as the default OME layout's 0/, read back as the same voxels."""
    vol = _labels("uint32")
    np.save(tmp_path / "vol.npy", vol)
    source = str(tmp_path / "vol.npy")
    dests = {}
    for layout in ("ome", "array"):
        dests[layout] = tmp_path / f"{layout}.zarr"
        api.convert(source, str(dests[layout]), scheduler="sync", progress=False,
                    format="zarr3", layer_type="segmentation", compression="zstd",
                    zarr_layout=layout, **SMALL)  # fmt: skip
    ome, bare = dests["ome"], dests["array"]
    _check_ome_group(ome, (1, 1, 1), label=True)
    meta = json.loads((bare / "zarr.json").read_text())
    assert meta["node_type"] == "array" and meta["shape"] == list(vol.shape)
    assert meta == json.loads((ome / "0" / "zarr.json").read_text())
    assert not (bare / "0").exists()
    shards = _zarr3_shards(bare)
    assert len(shards) > 1 and shards == _zarr3_shards(ome / "0")
    via_ts = ts.open({"driver": "zarr3", "kvstore": f"file://{bare}/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(via_ts), vol)
    np.testing.assert_array_equal(zarr.open_array(str(bare), mode="r")[...], vol)
    assert api.verify(str(bare), source, full=True).ok


def test_zarr3_array_layout_is_refused_where_it_cannot_apply(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "vol.npy", _image())
    source, dest = str(tmp_path / "vol.npy"), str(tmp_path / "out")
    # A pyramid has several level arrays: only the OME-Zarr group holds them.
    refused = r"zarr_layout='array' writes .*pyramid \(mips\) needs zarr_layout='ome'"
    with pytest.raises(PlanError, match=refused):
        api.plan(source, dest, format="zarr3", zarr_layout="array", mips=2, **SMALL)
    assert cli_main(["plan", source, dest, "--format", "zarr3", "--zarr-layout", "array",
                     "--mips", "2"]) == 2  # fmt: skip
    assert "needs --zarr-layout ome" in capsys.readouterr().err
    # Precomputed output has no zarr layout to choose.
    for layout in ("array", "ome"):
        with pytest.raises(PlanError, match="zarr.layout applies to zarr3 output"):
            api.plan(source, dest, format="precomputed", zarr_layout=layout, **SMALL)
    assert cli_main(["plan", source, dest, "--zarr-layout", "array"]) == 2
    assert "--zarr-layout applies to zarr3 output" in capsys.readouterr().err
    assert not pathlib.Path(dest).exists()


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_local_schedulers(tmp_path: pathlib.Path, scheduler: str) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    api.convert(
        str(tmp_path / "vol.npy"),
        str(tmp_path / "out"),
        scheduler=scheduler,
        progress=False,
        **SMALL,
    )
    for got in _read_precomputed(tmp_path / "out"):
        np.testing.assert_array_equal(got, _as_xyzc(vol))


@pytest.mark.parametrize("scheduler", ["local", "processes"])
def test_the_printed_dashboard_link_opens(
    scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The link printed for a cluster we start answers: it names the loopback address the
    dashboard listens on, not the machine's (which the in-process cluster would report)."""
    with connect(scheduler, 1, dashboard=True):
        link = capsys.readouterr().err.split("dask dashboard: ")[1].split()[0]
        assert link.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(link, timeout=30) as reply:
            assert reply.status == 200


def test_the_dashboard_starts_for_big_jobs_or_when_asked(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small job on the default cluster starts no dashboard (its start costs about a second,
    the job ends first); `--dashboard on` starts one even with --quiet, `off` never; a job
    reading 4 GiB or more gets one by default unless its progress is hidden."""
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    base = ["convert", str(tmp_path / "vol.npy"), "--chunk-size", "16,16,8"]
    for name, extra, shown in [
        ("auto", [], False),
        ("on", ["--dashboard", "on", "--quiet"], True),
        ("off", ["--dashboard", "off"], False),
    ]:
        assert cli_main([*base, str(tmp_path / name), *extra]) == 0
        assert ("dask dashboard: http://127.0.0.1:" in capsys.readouterr().err) == shown, name
    assert wants_dashboard(None, SMALL_JOB_BYTES, shown=True)
    assert not wants_dashboard(None, SMALL_JOB_BYTES - 1, shown=True)
    assert not wants_dashboard(None, SMALL_JOB_BYTES, shown=False)
    assert wants_dashboard(True, 0, shown=False) and not wants_dashboard(False, 2**50, shown=True)


def test_png_chunks_one_voxel_wide_reach_readers(tmp_path: pathlib.Path) -> None:
    for dtype in ("uint8", "uint16"):
        vol = _image(dtype)
        np.save(tmp_path / "vol.npy", vol)
        dest = tmp_path / dtype
        api.convert(str(tmp_path / "vol.npy"), str(dest), scheduler="sync", progress=False,
                    encoding="png", chunk_size=(1, 16, 8))  # fmt: skip
        if dtype == "uint8":
            readers = _read_precomputed(dest)
        else:  # CloudVolume misreads 16-bit PNGs one pixel wide: TensorStore alone
            spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}
            readers = [np.asarray(ts.open(spec).result().read().result())]
        for got in readers:
            np.testing.assert_array_equal(got, _as_xyzc(vol))


def test_the_precomputed_gzip_level_is_honoured(tmp_path: pathlib.Path) -> None:
    """Each stored chunk is the gzip codec's output at the level asked for."""
    from shardwright.codecs import GzipCodec, RawEncoding
    from shardwright.formats.precomputed.info import PrecomputedInfo
    from shardwright.formats.precomputed.sharded_reader import ShardedReader

    vol = _image(channels=2)  # compresses differently at ISA-L's levels 1 and 3
    np.save(tmp_path / "vol.npy", vol)
    stored = {}
    for level in (1, 9):
        dest = tmp_path / f"level{level}"
        api.convert(str(tmp_path / "vol.npy"), str(dest), scheduler="sync", progress=False,
                    compression_level=level, **SMALL)  # fmt: skip
        for got in _read_precomputed(dest):
            np.testing.assert_array_equal(got, _as_xyzc(vol))
        scale = PrecomputedInfo.from_json(json.loads((dest / "info").read_text())).scales[0]
        assert scale.sharding is not None
        shard_file = (dest / scale.key).joinpath
        reader = ShardedReader(
            scale.sharding, lambda name, a, b, f=shard_file: f(name).read_bytes()[a:b]
        )
        where = reader.locate(int(scale.chunk_ids(np.array([[0, 0, 0]]))[0]))
        assert where is not None
        name, start, size = where
        stored[level] = shard_file(name).read_bytes()[start : start + size]
        chunk = RawEncoding().encode(_as_xyzc(vol)[:16, :16, :8, :])
        assert stored[level] == GzipCodec(level).compress(chunk)
    assert stored[1] != stored[9]


@pytest.mark.parametrize("scheduler", ["local", "processes"])
@pytest.mark.parametrize("dashboard", [True, False])
def test_a_cluster_we_start_listens_on_loopback_only(scheduler: str, dashboard: bool) -> None:
    """Scheduler, workers, nannies and every HTTP endpoint of theirs, dashboard or not."""
    import psutil

    def listening() -> set[tuple[str, int]]:
        me = psutil.Process()
        return {
            (conn.laddr.ip, conn.laddr.port)
            for process in [me, *me.children(recursive=True)]
            for conn in process.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        }

    before = listening()  # other tests' clusters in this process
    with connect(scheduler, 2, dashboard=dashboard):
        ours = listening() - before
    assert ours, "a cluster listens somewhere"
    assert {ip for ip, _ in ours} == {"127.0.0.1"}, ours


def test_existing_scheduler_address_through_the_cli(tmp_path: pathlib.Path, client: Any) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    code = cli_main(
        [
            "convert",
            str(tmp_path / "vol.npy"),
            str(dest),
            "--scheduler",
            client.scheduler.address,
            "--chunk-size",
            "16,16,8",
            "--target-shard-bytes",
            "16K",
            "--quiet",
        ]
    )
    assert code == 0
    assert cli_main(["verify", str(dest), "--against", str(tmp_path / "vol.npy"), "--full"]) == 0
    for got in _read_precomputed(dest):
        np.testing.assert_array_equal(got, _as_xyzc(vol))


def test_memory_destination_with_threads(tmp_path: pathlib.Path) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    manifest = api.convert(
        str(tmp_path / "vol.npy"),
        "memory://sw-test/out",
        scheduler="threads",
        progress=False,
        **SMALL,
    )
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards > 1
    report = api.verify("memory://sw-test/out", str(tmp_path / "vol.npy"), full=True)
    assert report.ok, report.summary()


def test_compute_false_returns_a_pending_conversion(tmp_path: pathlib.Path, client: Any) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    lazy = api.convert(str(tmp_path / "vol.npy"), str(dest), compute=False, **SMALL)
    assert isinstance(lazy, api.PendingConversion) and ".compute()" in repr(lazy)
    assert not dest.exists()  # nothing written until computed, not even the lease
    manifest = lazy.compute(client=client, progress=False)
    assert (dest / MANIFEST_KEY).exists()
    assert manifest.totals.chunks == 3 * 3 * 3
    assert not list(dest.glob(".shardwright/lease-*"))  # the coordinator released it


def test_plan_command_prints_the_report_and_writes_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "vol.npy", _image())
    dest = tmp_path / "out"
    assert (
        cli_main(
            [
                "plan",
                str(tmp_path / "vol.npy"),
                str(dest),
                "--chunk-size",
                "16,16,8",
                "--target-shard-bytes",
                "16K",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for words in ("shards", "sharding", "shard index", "peak per task", "chunks"):
        assert words in out
    assert not dest.exists()
    assert cli_main(["plan", str(tmp_path / "vol.npy"), str(dest), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["chunks"] == 1 and plan["shards"] == 1


def test_verify_detects_a_corrupted_shard(tmp_path: pathlib.Path) -> None:
    vol = _image()
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    api.convert(str(tmp_path / "vol.npy"), str(dest), scheduler="sync", progress=False, **SMALL)
    assert api.verify(str(dest)).ok
    shard = sorted((dest / "1_1_1").glob("*.shard"))[0]
    data = bytearray(shard.read_bytes())
    data[-30] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = api.verify(str(dest))
    assert not report.ok
    assert any(shard.name in p for p in report.problems)
    assert cli_main(["verify", str(dest)]) == 1


def test_package_level_plan_and_verify_are_the_api_after_any_import(
    tmp_path: pathlib.Path,
) -> None:
    """`shardwright.plan(...)` / `shardwright.verify(...)` (as the README writes them) stay the
    functions once the same-named submodules are imported, as any conversion imports them."""
    np.save(tmp_path / "vol.npy", np.arange(20 * 18 * 16, dtype=np.uint16).reshape(20, 18, 16))
    script = f"""
import shardwright
from shardwright.errors import PlanError
import shardwright.planning, shardwright.verification
the_plan = shardwright.plan({str(tmp_path / "vol.npy")!r}, {str(tmp_path / "out")!r},
                            chunk_size=(8, 8, 8))
shardwright.convert(the_plan, scheduler="sync", progress=False)
report = shardwright.verify({str(tmp_path / "out")!r}, against={str(tmp_path / "vol.npy")!r})
assert report.ok, report.summary()
from shardwright import plan, verify
assert plan is shardwright.plan and verify is shardwright.verify
print(type(the_plan).__name__, issubclass(PlanError, ValueError))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ConversionPlan", "True"]
