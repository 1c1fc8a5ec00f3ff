"""Levels added in place to OME-Zarr 0.4 groups (Zarr v2): as ome-zarr-py writes them (t, c,
z, y, x; zstd), as bioformats2raw lays them out (a container whose image is its series `0/`,
blosc, 2-D chunks), images and labels, on disk and in S3.

Each new level is a Zarr v2 array beside the group's, stored as the array it is reduced from
(data type, compressor, fill value, separator), one object per chunk; the group's `.zattrs`
gains one dataset per level, its scale and translation on the group's rule, in one
conditional write, last. Every object the group had keeps its bytes but `.zattrs`;
zarr-python, TensorStore and ome-zarr-py read the new levels as the reduction of the one below
(an independent reference: the per-block mean, tinybrain's mode); a kill then `--resume`, a
concurrent change of `.zattrs`, and what cannot be added to are each a test."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import shardwright
from shardwright import api
from shardwright.errors import DestinationError, PlanError
from tests.support import SUPPORT, existing_datasets, label_shapes
from tests.support.downsampling_reference import reference

# Imported at collection, as in every GCS test: it sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT to
# false before anything imports gcsfs (the emulator has no zonal buckets to ask about).
from tests.support.object_store_servers import GcsServer

DRIVER = SUPPORT / "lifecycle_driver.py"
NEW = (".shardwright/",)  # besides the new levels' folders, all an addition may create


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True
    )


def _ome04(path: pathlib.Path, image: np.ndarray, axes: str, chunks: tuple[int, ...]) -> None:
    """An OME-Zarr 0.4 group as ome-zarr-py writes one: its pyramid of 2 levels (y and x
    halved), `s0`, `s1`, each level translated so that voxel centres line up."""
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    fmt = FormatV04()
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store)
    write_image(image, root, axes=axes, fmt=fmt, scale_factors=[2],
                storage_options={"chunks": chunks})  # fmt: skip


def _datasets(path: pathlib.Path) -> list[dict[str, Any]]:
    return json.loads((path / ".zattrs").read_text())["multiscales"][0]["datasets"]


def _average(level: np.ndarray, factor: tuple[int, int, int], axes: str) -> np.ndarray:
    """The reference mean of an array in `axes` order (t, if any, first and of one time
    point), by x, y, z `factor`."""
    inner, kept = (level[0], axes[1:]) if axes.startswith("t") else (level, axes)
    if "c" not in kept:
        inner, kept = inner[np.newaxis], "c" + kept
    xyzc = np.transpose(inner, [kept.index(a) for a in "xyzc"])
    reduced = reference(np.ascontiguousarray(xyzc), factor, "average")
    back = np.transpose(reduced, ["xyzc".index(a) for a in kept])
    back = back if "c" in axes else back[0]
    return back[np.newaxis] if axes.startswith("t") else back


@pytest.fixture()
def ome_zarr_py_image(tmp_path: pathlib.Path) -> pathlib.Path:
    """ome-zarr-py's 0.4 image: t, c, z, y, x, two channels, 64 x 64 x 16, chunks of one
    channel (zstd, '/'-separated keys)."""
    path = tmp_path / "image.ome.zarr"
    image = np.random.default_rng(4).integers(0, 256, (1, 2, 16, 64, 64), dtype=np.uint8)
    _ome04(path, image, "tczyx", (1, 1, 8, 32, 32))
    return path


def test_a_level_added_to_an_ome_zarr_py_04_image(ome_zarr_py_image: pathlib.Path) -> None:
    """Two levels above `s1`: `s2`, `s3`, Zarr v2 arrays stored as `s1` is (its dtype,
    compressor, fill value and separator; every channel in a chunk), each the mean of the
    level below as zarr-python, TensorStore and ome-zarr-py read it; the group's datasets list
    them with the scale and translation the 0.4 format's rule gives; nothing the group had
    changed but its `.zattrs`; `verify --full` holds each level to its reduction."""
    import ome_zarr_models
    import tensorstore as ts
    import zarr
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    path = ome_zarr_py_image
    before = existing_datasets.object_crc32cs(str(path))
    zattrs_before = json.loads((path / ".zattrs").read_text())
    done = _cli("convert", str(path), "--mips", "2", "--factor", "2,2,1")
    assert done.returncode == 0, done.stderr
    assert "an OME-Zarr 0.4 group (Zarr v2)" in done.stderr, done.stderr
    assert "s2: 16 x 16 x 16 voxels" in done.stderr and "2 chunk objects of 16 x 16 x 8" in (
        done.stderr)  # fmt: skip
    assert "added 4 chunk objects" in done.stdout, done.stdout
    after = existing_datasets.object_crc32cs(str(path))
    assert existing_datasets.kept(before, after) == [".zattrs"]
    new = [k for k in after if k not in before and not k.startswith(("s2/", "s3/", *NEW))]
    assert new == []
    zattrs = json.loads((path / ".zattrs").read_text())
    datasets = zattrs["multiscales"][0]["datasets"]
    assert datasets[:2] == zattrs_before["multiscales"][0]["datasets"]
    assert {**zattrs["multiscales"][0], "datasets": None} == {
        **zattrs_before["multiscales"][0], "datasets": None}  # fmt: skip
    assert [d["path"] for d in datasets[2:]] == ["s2", "s3"]
    for k, dataset in enumerate(datasets[2:], 2):
        scale, shift = (t[t["type"]] for t in dataset["coordinateTransformations"])
        assert scale == [1, 1, 1, 2**k, 2**k]
        assert shift == [0, 0, 0, (2**k - 1) / 2, (2**k - 1) / 2]  # as ome-zarr-py's own
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(path), mode="r"))
    s1 = json.loads((path / "s1" / ".zarray").read_text())
    s2 = json.loads((path / "s2" / ".zarray").read_text())
    for member in ("dtype", "compressor", "fill_value", "order", "dimension_separator"):
        assert s2[member] == s1[member], member
    assert s2["shape"] == [1, 2, 16, 16, 16] and s2["chunks"] == [1, 2, 8, 16, 16]
    group = zarr.open_group(str(path), mode="r")
    below = np.asarray(group["s1"][...])
    for key in ("s2", "s3"):
        want = _average(below, (2, 2, 1), "tczyx")
        assert np.array_equal(group[key][...], want), key
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path / key)}}
        assert np.array_equal(ts.open(spec).result().read().result(), want), key
        below = want
    (image, *_) = Reader(parse_url(str(path)))()
    assert [d.shape for d in image.data][2:] == [(1, 2, 16, 16, 16), (1, 2, 16, 8, 8)]
    report = api.verify(str(path), full=True)
    assert report.ok, report.problems
    assert "added by shardwright in place: s2/.zarray, s3/.zarray, .zattrs, level s2, " \
        "level s3" in report.notes[-1]  # fmt: skip


def test_labels_gain_a_level_equal_to_tinybrains(tmp_path: pathlib.Path) -> None:
    """An OME-Zarr 0.4 label image (image-label, z, y, x, uint32): its level is tinybrain's
    mode of the one below, and keeps the group's label metadata."""
    import zarr

    tinybrain = pytest.importorskip("tinybrain")
    path = tmp_path / "labels.ome.zarr"
    labels = label_shapes.labels()[:, :, :32].T.astype(np.uint32)  # z, y, x
    _ome04(path, labels, "zyx", (16, 32, 32))
    zattrs = json.loads((path / ".zattrs").read_text())
    zattrs["image-label"] = {"version": "0.4", "colors": [{"label-value": 1, "rgba": [1, 2, 3, 4]}]}
    (path / ".zattrs").write_text(json.dumps(zattrs))
    before = existing_datasets.object_crc32cs(str(path))
    plan = api.plan(str(path), mips=1, factor=(2, 2, 1))
    assert plan.levels is not None and plan.levels.layer_type == "segmentation"
    api.convert(plan, scheduler="sync", progress=False)
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(path))) == [
        ".zattrs"]  # fmt: skip
    after = json.loads((path / ".zattrs").read_text())
    assert after["image-label"] == zattrs["image-label"]
    s1 = np.asarray(zarr.open_array(str(path / "s1"), mode="r")[...])
    (want,) = tinybrain.downsample_segmentation(np.asfortranarray(s1.T), (2, 2, 1))
    assert np.array_equal(zarr.open_array(str(path / "s2"), mode="r")[...], np.asarray(want).T)
    assert api.verify(str(path), full=True).ok


def _bioformats2raw(path: pathlib.Path, image: np.ndarray) -> pathlib.Path:
    """A bioformats2raw container (`bioformats2raw.layout`, its series `0/`) of one 0.4
    image, t, c, z, y, x, in 2-D chunks of one channel, blosc lz4 with shuffle, '/' keys,
    micrometres: two levels, y and x halved. Returns the series."""
    import zarr
    from numcodecs import Blosc

    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    series = root.create_group("0")
    datasets = []
    for k in range(2):
        level = image[..., :: 2**k, :: 2**k]
        array = series.create_array(
            str(k), shape=level.shape, dtype=level.dtype, chunks=(1, 1, 1, 32, 32),
            compressors=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
            chunk_key_encoding={"name": "v2", "separator": "/"}, fill_value=0,
        )  # fmt: skip
        array[...] = level
        datasets.append({"path": str(k), "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 1.0, 0.5, 0.1 * 2**k, 0.1 * 2**k]}]})  # fmt: skip
    axes = [
        {"name": "t", "type": "time", "unit": "second"},
        {"name": "c", "type": "channel"},
        *({"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"),
    ]
    series.attrs["multiscales"] = [
        {"version": "0.4", "name": "image", "datasets": datasets, "axes": axes}
    ]
    return path / "0"


def test_a_bioformats2raw_series_gains_levels_in_2d_chunks(tmp_path: pathlib.Path) -> None:
    """bioformats2raw's layout: the container itself is refused in one line naming its series;
    the series gains levels whose chunks are its own (one z slice), two slices deep where z is
    reduced above them (a task's chunk holds whole downsampling blocks); blosc's settings
    carried; the new dataset's scale is the step's and its translation follows the group's
    rule (none: every level starts at 0)."""
    import zarr

    image = np.random.default_rng(9).integers(0, 4000, (1, 2, 6, 64, 96), dtype=np.uint16)
    series = _bioformats2raw(tmp_path / "plate.zarr", image)
    container = _cli("convert", str(tmp_path / "plate.zarr"), "--mips", "1")
    assert container.returncode == 2 and "bioformats2raw container" in container.stderr
    assert f"{series}" in container.stderr and "Traceback" not in container.stderr
    before = existing_datasets.object_crc32cs(str(series))
    done = _cli("convert", str(series), "--mips", "1", "--factor", "2,2,1", "--quiet")
    assert done.returncode == 0, done.stderr
    group = zarr.open_group(str(series), mode="r")
    assert group["2"].chunks == (1, 2, 1, 16, 24) and group["2"].shape == (1, 2, 6, 16, 24)
    zarray = json.loads((series / "2" / ".zarray").read_text())
    assert zarray["compressor"] == json.loads((series / "1" / ".zarray").read_text())[
        "compressor"]  # fmt: skip
    want = _average(np.asarray(group["1"][...]), (2, 2, 1), "tczyx")
    assert np.array_equal(group["2"][...], want)
    (added,) = _datasets(series)[2:]
    scale, shift = (t[t["type"]] for t in added["coordinateTransformations"])
    assert scale == pytest.approx([1, 1, 0.5, 0.4, 0.4])
    assert shift == pytest.approx([0, 0, 0, 0, 0])  # the group's rule: every level at 0
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(series))) == [
        ".zattrs"]  # fmt: skip
    deeper = _cli("convert", str(series), "--mips", "2", "--factor", "2,2,2", "--quiet")
    assert deeper.returncode == 0, deeper.stderr
    group = zarr.open_group(str(series), mode="r")
    # Level 3's chunks are two slices deep, whole 2 x 2 x 2 blocks of level 4's reduction
    # (its 3 slices: a last chunk half outside); level 4 is the top, one slice again.
    assert group["3"].chunks == (1, 2, 2, 8, 12) and group["3"].shape == (1, 2, 3, 8, 12)
    assert group["4"].chunks == (1, 2, 1, 4, 6) and group["4"].shape == (1, 2, 2, 4, 6)
    below = np.asarray(group["2"][...])
    for key in ("3", "4"):
        want = _average(below, (2, 2, 2), "tczyx")
        assert np.array_equal(group[key][...], want), key
        below = want
    assert api.verify(str(series), full=True).ok


def test_a_killed_addition_to_a_04_group_resumes(
    ome_zarr_py_image: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Killed after one chunk object was stored: `.zattrs` names no new level yet (every
    reader sees the group as before); `status` counts it; `--resume` keeps it, writes the
    rest and names the levels."""
    from tests.e2e.test_in_place import _killed_at

    path = ome_zarr_py_image
    zattrs_before = (path / ".zattrs").read_bytes()
    flags = ["--mips", "2", "--factor", "2,2,1"]
    total = sum(level.shard_count for level in api.plan(str(path), mips=2,
                                                        factor=(2, 2, 1)).new_levels)  # fmt: skip
    _killed_at("shards:1", tmp_path / "paused", str(path), *flags)
    assert (path / ".zattrs").read_bytes() == zattrs_before
    stopped = shardwright.status(str(path))
    assert stopped.state == "stopped" and (stopped.shards_stored, stopped.shards_planned) == (
        1, total)  # fmt: skip
    done = _cli("convert", str(path), *flags, "--resume", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "(1 kept from an earlier run)" in done.stdout, done.stdout
    assert [d["path"] for d in _datasets(path)] == ["s0", "s1", "s2", "s3"]
    assert api.verify(str(path), full=True).ok


def test_a_zattrs_changed_while_the_job_ran_is_not_overwritten(
    ome_zarr_py_image: pathlib.Path,
) -> None:
    path = ome_zarr_py_image
    pending = api.convert(str(path), mips=1, factor=(2, 2, 1), scheduler="sync",
                          progress=False, compute=False)  # fmt: skip
    assert isinstance(pending, api.PendingConversion)
    edited = json.loads((path / ".zattrs").read_text())
    edited["multiscales"][0]["name"] = "renamed by a person meanwhile"
    (path / ".zattrs").write_text(json.dumps(edited))
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert json.loads((path / ".zattrs").read_text()) == edited


def test_an_04_group_in_s3_gains_a_level(ome_zarr_py_image: pathlib.Path, s3: Any) -> None:
    """In a bucket: read there, written there, `.zattrs` last (conditional on its ETag);
    TensorStore reads the new level from the bucket."""
    import tensorstore as ts

    s3.make_bucket("lab")
    options = s3.options()
    url = "s3://lab/image.ome.zarr"
    bucket = existing_datasets.copied(str(ome_zarr_py_image), url, dest_options=options)
    before = existing_datasets.object_crc32cs(url, options)
    api.convert(url, mips=1, factor=(2, 2, 1), storage_options=options, scheduler="sync",
                progress=False)  # fmt: skip
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(url, options)) == [
        ".zattrs"]  # fmt: skip
    zattrs = json.loads(bucket.read(".zattrs"))
    assert [d["path"] for d in zattrs["multiscales"][0]["datasets"]] == ["s0", "s1", "s2"]
    s1 = np.asarray(ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(
        ome_zarr_py_image / "s1")}}).result().read().result())  # fmt: skip
    kvstore = {"driver": "s3", "bucket": "lab", "path": "image.ome.zarr/s2/",
               "endpoint": s3.endpoint, "aws_region": "us-east-1"}  # fmt: skip
    spec = {"driver": "zarr", "kvstore": kvstore}
    read = np.asarray(ts.open(spec).result().read().result())
    assert np.array_equal(read, _average(s1, (2, 2, 1), "tczyx"))
    assert api.verify(url, storage_options=options, full=True).ok


@pytest.mark.gcs
def test_an_04_group_in_gcs_gains_a_level(
    ome_zarr_py_image: pathlib.Path, gcs: GcsServer, tmp_path: pathlib.Path
) -> None:
    """In a GCS bucket (the emulator, honouring `ifGenerationMatch`): `.zattrs` rewritten
    with the same bytes after the plan looked it up is not written over (its generation
    tells); `--resume` then adds the level; copied back, zarr-python reads it as the mean of
    the level below, and every object the group had keeps its bytes but `.zattrs`."""
    import zarr

    gcs.make_bucket("lab")
    options = gcs.options(gcs.conformant_endpoint)
    url = "gs://lab/image.ome.zarr"
    bucket = existing_datasets.copied(str(ome_zarr_py_image), url, dest_options=options)
    before = existing_datasets.object_crc32cs(url, options)
    run: dict[str, Any] = dict(mips=1, factor=(2, 2, 1), storage_options=options,
                               scheduler="sync", progress=False)  # fmt: skip
    pending = api.convert(url, compute=False, **run)
    assert isinstance(pending, api.PendingConversion)
    zattrs = bucket.read(".zattrs")
    bucket.write_object(".zattrs", zattrs)
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert bucket.read(".zattrs") == zattrs
    api.convert(url, resume=True, **run)
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(url, options)) == [
        ".zattrs"]  # fmt: skip
    existing_datasets.copied(url, str(tmp_path / "copy"), source_options=options)
    group = zarr.open_group(str(tmp_path / "copy"), mode="r")
    want = _average(np.asarray(group["s1"][...]), (2, 2, 1), "tczyx")
    assert np.array_equal(group["s2"][...], want)


def test_levels_made_again_with_overwrite(ome_zarr_py_image: pathlib.Path) -> None:
    """With --overwrite the level shardwright added is made again beside it (`s2-2`), the
    group names it in its one write, then the old array's objects go, and nothing else."""
    path = ome_zarr_py_image
    before = existing_datasets.object_crc32cs(str(path))
    assert _cli("convert", str(path), "--mips", "1", "--quiet").returncode == 0
    again = _cli("convert", str(path), "--mips", "2", "--overwrite", "--quiet")
    assert again.returncode == 0, again.stderr
    assert [d["path"] for d in _datasets(path)] == ["s0", "s1", "s2-2", "s3"]
    assert not (path / "s2").exists()
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(path))) == [
        ".zattrs"]  # fmt: skip
    assert api.verify(str(path), full=True).ok


def test_what_cannot_be_added_to_is_refused_in_one_line(tmp_path: pathlib.Path) -> None:
    """A version other than 0.4, a bare v2 array, a group without attributes, meshes asked of
    a 0.4 group: one line each, nothing written."""
    import zarr

    old = tmp_path / "old.ome.zarr"
    _ome04(old, np.zeros((8, 32, 32), np.uint8), "zyx", (8, 32, 32))
    zattrs = json.loads((old / ".zattrs").read_text())
    zattrs["multiscales"][0]["version"] = "0.3"
    (old / ".zattrs").write_text(json.dumps(zattrs))
    bare = tmp_path / "bare.zarr"
    zarr.open_array(str(bare), mode="w", shape=(8, 8), dtype="u1", zarr_format=2)[...] = 1
    plain = tmp_path / "plain.zarr"
    zarr.open_group(str(plain), mode="w", zarr_format=2)
    bare_group = tmp_path / "bare-group.zarr"
    bare_group.mkdir()
    (bare_group / ".zgroup").write_text('{"zarr_format": 2}')
    meshes = tmp_path / "meshes.ome.zarr"
    _ome04(meshes, np.zeros((8, 32, 32), np.uint32), "zyx", (8, 32, 32))
    cases = [
        (old, ["--mips", "1"], "OME-Zarr 0.3; shardwright adds levels to OME-Zarr 0.4"),
        (bare, ["--mips", "1"], "a bare Zarr v2 array"),
        (plain, ["--mips", "1"], ".zattrs lists no OME-Zarr multiscales"),
        (bare_group, ["--mips", "1"], "a Zarr v2 group without .zattrs"),
        (meshes, ["--generate-meshes"], "is an OME-Zarr 0.4 group (Zarr v2), to which shardwright"),
    ]
    for path, flags, message in cases:
        before = existing_datasets.object_crc32cs(str(path))
        done = _cli("convert", str(path), *flags)
        assert done.returncode == 2 and message in done.stderr, (path, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert existing_datasets.object_crc32cs(str(path)) == before
    with pytest.raises(PlanError, match="mips=9 is too many for a 16 x 16 x 8 volume"):
        api.plan(str(meshes), mips=9)
