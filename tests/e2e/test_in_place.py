"""Meshes and skeletons added to segmentations that already exist (`convert DEST
--generate-meshes --generate-skeletons`): CloudVolume's, TensorStore's and ours, on disk and
in S3. Every object the dataset had keeps its bytes (crc32c before and after), its info gains
only the names of what was added, written last; independent readers (CloudVolume's mesh and
skeleton readers, TensorStore) read the result; refusals write nothing; a kill at each step
leaves the dataset as it was and `--resume` finishes it."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import shardwright
from shardwright import api
from shardwright.errors import DestinationError, LeaseHeld, PlanError
from shardwright.lifecycle.lease import Lease
from shardwright.stores import open_store
from tests.support import SUPPORT, existing_datasets, label_shapes

pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")
pytest.importorskip("cloudvolume")

ADD = ["--generate-meshes", "--generate-skeletons", "--mesh-block", "32,32,32"]
QUIET = [*ADD, "--scheduler", "sync", "--quiet"]
DRIVER = SUPPORT / "lifecycle_driver.py"
ADDED = ("mesh/", "skeletons/", ".shardwright/")  # what an addition may create


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True
    )


def _check_added(
    url: str,
    before: dict[str, int],
    info_before: dict[str, Any],
    *,
    ours: bool = False,
    levels: tuple[str, ...] = (),
) -> None:
    """Nothing the dataset had changed but its info, which gained only the directories'
    names, the scales of `levels` after its own (and, for ours, the manifest's digest of
    it); nothing new but the directories, those levels and `.shardwright/`; every segment
    has its mesh and skeleton as CloudVolume reads them; the added directories verify (each
    segment of the job's census with its object)."""
    from cloudvolume import CloudVolume

    store = open_store(url)
    after = existing_datasets.object_crc32cs(url)
    changed = existing_datasets.kept(before, after)
    assert changed == (["info", "shardwright-manifest.json"] if ours else ["info"]), changed
    allowed = (*ADDED, *(f"{key}/" for key in levels))
    new = [key for key in after if key not in before and not key.startswith(allowed)]
    assert new == [], new
    info = json.loads(store.read("info"))
    own = len(info_before["scales"])
    assert info["scales"][:own] == info_before["scales"]
    assert [scale["key"] for scale in info["scales"][own:]] == list(levels)
    assert {**info, "scales": info_before["scales"]} == {
        **info_before, "mesh": "mesh", "skeletons": "skeletons"
    }  # fmt: skip
    volume = CloudVolume(url if "://" in url else f"file://{url}", progress=False)
    for name, segment in label_shapes.SEGMENTS.items():
        mesh = volume.mesh.get(segment, lod=0)
        mesh = mesh[segment] if isinstance(mesh, dict) else mesh
        assert len(mesh.faces) > 0, name
        skeleton = volume.skeleton.get(segment)
        assert len(skeleton.edges) > 0 and len(skeleton.components()) == 1, name
    for sub in ("mesh", "skeletons"):
        report = api.verify(f"{url}/{sub}", full=True)
        assert report.ok, report.problems
        assert f"{len(label_shapes.SEGMENTS)} segments over the dust threshold" in report.notes[0]


def _killed_at(pause: str, marker: pathlib.Path, url: str, *flags: str) -> None:
    """An addition to `url` paused at a step of the lifecycle driver's, then killed with its
    whole process group (SIGKILL: no cleanup of any kind)."""
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), pause, str(marker), "convert", url, *flags],
        start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 120
    try:
        while not marker.exists():
            assert proc.poll() is None and time.time() < deadline, "the job never paused"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: the assertion says why
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture()
def cloudvolume_dataset(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "cloudvolume"
    label_shapes.write_precomputed(path)
    return path


def test_added_to_a_cloudvolume_segmentation_in_place(cloudvolume_dataset: pathlib.Path) -> None:
    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((cloudvolume_dataset / "info").read_text())
    done = _cli("convert", url, *ADD, "--scheduler", "sync")
    assert done.returncode == 0, done.stderr
    assert "written by another tool: it gains only .shardwright/ beside its objects" in (
        done.stderr
    )
    assert "added 1 shard, 5 segments of 5 present" in done.stdout
    assert "info names them (mesh -> mesh, skeletons -> skeletons)" in done.stdout
    _check_added(url, before, info_before)
    control = sorted(p.name for p in (cloudvolume_dataset / ".shardwright").iterdir())
    assert control == ["additions"]  # the lease released, the running record gone
    record = next((cloudvolume_dataset / ".shardwright" / "additions").iterdir())
    added = json.loads(record.read_text())
    assert added["dataset"] == "addition" and set(added["companions"]) == {
        f"{url}/mesh",
        f"{url}/skeletons",
    }
    again = _cli("convert", url, *QUIET)  # a second addition finds the directories
    assert again.returncode == 2 and "pass --resume" in again.stderr, again.stderr


def test_added_to_a_tensorstore_sharded_segmentation(tmp_path: pathlib.Path) -> None:
    """TensorStore stores no chunk that is all 0: read as missing unless the user says
    --fill-missing, as for any precomputed source."""
    import tensorstore as ts

    url = existing_datasets.write_tensorstore_sharded(tmp_path / "tensorstore")
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((tmp_path / "tensorstore" / "info").read_text())
    refused = _cli("convert", url, *QUIET)
    assert refused.returncode == 2 and "Pass --fill-missing" in refused.stderr, refused.stderr
    assert existing_datasets.object_crc32cs(url) == before
    done = _cli("convert", url, *QUIET, "--fill-missing")
    assert done.returncode == 0, done.stderr
    _check_added(url, before, info_before)
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": url}}
    read = ts.open(spec).result().read().result()[..., 0]
    assert np.array_equal(read, label_shapes.labels())  # TensorStore reads it as before


def test_a_cloudvolume_sharded_segmentation_gains_meshes_skeletons_and_a_level(
    tmp_path: pathlib.Path,
) -> None:
    """A sharded scale as CloudVolume (and Igneous's sharded tasks, through it) writes one:
    meshes, skeletons and a level in one job, the scale read once (its block tasks feed the
    level); the shard keeps its bytes, CloudVolume reads the meshes and skeletons,
    TensorStore the level, which is tinybrain's reduction."""
    import tensorstore as ts

    path = tmp_path / "sharded"
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
            "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}  # fmt: skip
    url = label_shapes.write_precomputed(path, sharding=spec).removeprefix("file://")
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((path / "info").read_text())
    done = _cli("convert", url, *QUIET, "--mips", "1", "--factor", "2,2,1")
    assert done.returncode == 0, done.stderr
    _check_added(url, before, info_before, levels=("16_16_16",))
    level = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{url}",
                     "scale_index": 1}).result().read().result()  # fmt: skip
    (want,) = _tinybrain_levels(label_shapes.labels(), (2, 2, 1), 1)
    assert np.array_equal(np.asarray(level)[..., 0], want)


def test_added_to_our_own_conversion_keeps_its_manifest_true(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Our dataset's manifest follows its new info: `verify` of the volume against its
    source still passes, and its shards are untouched."""
    ours = tmp_path / "ours"
    done = _cli("convert", str(cloudvolume_dataset), str(ours), "--quiet", "--scheduler", "sync")
    assert done.returncode == 0, done.stderr
    before = existing_datasets.object_crc32cs(str(ours))
    info_before = json.loads((ours / "info").read_text())
    plan = api.plan(str(ours), generate_meshes=True, generate_skeletons=True,
                    mesh_block=(32, 32, 32))  # fmt: skip
    assert "converted by shardwright" in plan.report()
    added = api.convert(str(ours), generate_meshes=True, generate_skeletons=True,
                        mesh_block=(32, 32, 32), scheduler="sync", progress=False)  # fmt: skip
    assert added.dataset == "addition" and len(added.companions) == 2
    _check_added(str(ours), before, info_before, ours=True)
    report = api.verify(str(ours), str(cloudvolume_dataset), full=True)
    assert report.ok, report.problems


def test_added_in_s3(cloudvolume_dataset: pathlib.Path, s3: Any) -> None:
    """A dataset in a bucket: read there and written there; the info's write is
    conditional on the ETag the plan read, so a change in between is refused."""
    s3.make_bucket("lab")
    options = s3.options()
    url = "s3://lab/segmentation"
    bucket = existing_datasets.copied(str(cloudvolume_dataset), url, dest_options=options)
    before = existing_datasets.object_crc32cs(url, options)
    info_before = json.loads(bucket.read("info"))
    pending = api.convert(url, generate_meshes=True, generate_skeletons=True,
                          mesh_block=(32, 32, 32), storage_options=options,
                          scheduler="sync", progress=False, compute=False)  # fmt: skip
    assert isinstance(pending, api.PendingConversion)
    changed = {**info_before, "note": "edited by a person meanwhile"}
    bucket.write_object("info", json.dumps(changed).encode())
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert json.loads(bucket.read("info")) == changed  # the person's edit stands
    again = api.convert(url, generate_meshes=True, generate_skeletons=True,
                        mesh_block=(32, 32, 32), storage_options=options, scheduler="sync",
                        progress=False, resume=True)  # fmt: skip
    assert again.dataset == "addition"
    after = existing_datasets.object_crc32cs(url, options)
    assert existing_datasets.kept(before, after) == ["info"]
    info = json.loads(bucket.read("info"))
    assert info == {**changed, "mesh": "mesh", "skeletons": "skeletons"}
    for sub in ("mesh", "skeletons"):
        assert api.verify(f"{url}/{sub}", storage_options=options).ok


@pytest.mark.parametrize("pause", ["lease", "addition", "shards:6", "manifest", "info"])
def test_a_killed_addition_leaves_the_dataset_readable_and_resumes(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path, pause: str
) -> None:
    """Killed at each step (whole process group): the dataset's objects are as they were,
    its info names nothing half-written (the info step: it names what is complete), and
    `--resume` finishes the same addition."""
    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((cloudvolume_dataset / "info").read_text())
    _killed_at(pause, tmp_path / "paused", url, *ADD)
    after = existing_datasets.object_crc32cs(url)
    info = json.loads((cloudvolume_dataset / "info").read_text())
    if pause == "info":
        assert info == {**info_before, "mesh": "mesh", "skeletons": "skeletons"}
        for sub in ("mesh", "skeletons"):  # complete before the info named them
            assert api.verify(f"{url}/{sub}").ok
    else:
        assert existing_datasets.kept(before, after) == []
    if pause == "lease":  # nothing begun: the same command takes the dead job's lease over
        done = _cli("convert", url, *QUIET)
        assert "that process is gone" in done.stderr
    else:  # not over an unfinished addition: it is resumed
        fresh = _cli("convert", url, *QUIET)
        assert fresh.returncode == 2 and "--resume" in fresh.stderr, fresh.stderr
        done = _cli("convert", url, *QUIET, "--resume")
    assert done.returncode == 0, done.stderr
    _check_added(url, before, info_before)


@pytest.mark.parametrize(
    ("flags", "wording"),
    [
        (["--chunk-size", "64,64,64"], "--chunk-size shape a conversion's volume"),
        (["--mesh-level", "1"], "pass --source-scale KEY to mesh a coarser scale"),
        ([], None),  # no flag: nothing to add
    ],
)
def test_options_an_addition_cannot_take_are_refused(
    cloudvolume_dataset: pathlib.Path, flags: list[str], wording: str | None
) -> None:
    before = existing_datasets.object_crc32cs(str(cloudvolume_dataset))
    asked = ["--generate-meshes", *flags] if flags else []
    done = _cli("convert", str(cloudvolume_dataset), *asked)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (wording or "convert takes SOURCE and DEST") in done.stderr.replace("\n", " ")
    assert existing_datasets.object_crc32cs(str(cloudvolume_dataset)) == before


def _image(path: pathlib.Path) -> str:
    label_shapes.write_precomputed(path, np.zeros((64, 64, 32), np.uint8), (8, 8, 8),
                                   layer_type="image", encoding="raw")  # fmt: skip
    return str(path)


def test_what_cannot_be_added_to_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, cloudvolume_dataset: pathlib.Path
) -> None:
    image = _image(tmp_path / "image")
    empty = tmp_path / "empty"
    empty.mkdir()
    zarr = tmp_path / "volume.zarr"
    zarr.mkdir()
    (zarr / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "info").write_text("{not json")
    foreign_mesh = tmp_path / "igneous"
    label_shapes.write_precomputed(foreign_mesh)
    info = json.loads((foreign_mesh / "info").read_text())
    (foreign_mesh / "info").write_text(json.dumps({**info, "mesh": "mesh"}))
    (foreign_mesh / "mesh").mkdir()
    (foreign_mesh / "mesh" / "info").write_text('{"@type": "neuroglancer_legacy_mesh"}')
    cases = [
        (image, "need a segmentation (integer labels), not an image of uint8"),
        (str(empty), "has no info, zarr.json or .zgroup: no dataset to add to"),
        (str(zarr), "go beside a precomputed segmentation"),
        (str(broken), "info is not valid JSON"),
        (str(foreign_mesh), "which shardwright did not write"),
    ]
    for dest, wording in cases:
        before = existing_datasets.object_crc32cs(dest)
        with pytest.raises(PlanError, match=re.escape(wording)):
            api.plan(dest, generate_meshes=True, generate_skeletons=True)
        done = _cli("convert", dest, *QUIET)
        assert done.returncode == 2 and wording in done.stderr.replace("\n", " "), done.stderr
        assert "Traceback" not in done.stderr
        assert existing_datasets.object_crc32cs(dest) == before, dest


def test_a_dataset_another_job_holds_is_refused(cloudvolume_dataset: pathlib.Path) -> None:
    store = open_store(str(cloudvolume_dataset))
    held = Lease(store, "another-job")
    held.acquire()
    try:
        with pytest.raises(LeaseHeld):
            api.convert(str(cloudvolume_dataset), generate_meshes=True, scheduler="sync",
                        progress=False)  # fmt: skip
        assert not (cloudvolume_dataset / "mesh").exists()
        assert "mesh" not in json.loads((cloudvolume_dataset / "info").read_text())
    finally:
        held.release()


def test_an_addition_is_replaced_only_with_overwrite(cloudvolume_dataset: pathlib.Path) -> None:
    """--overwrite makes the meshes again (the old ones removed only after the new
    manifest); the dataset's own objects are untouched throughout."""
    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((cloudvolume_dataset / "info").read_text())
    assert _cli("convert", url, *QUIET).returncode == 0
    done = _cli("convert", url, *QUIET, "--overwrite", "--dust-threshold", "3000")
    assert done.returncode == 0, done.stderr
    after = existing_datasets.object_crc32cs(url)
    assert existing_datasets.kept(before, after) == ["info"]
    assert json.loads((cloudvolume_dataset / "info").read_text()) == {
        **info_before, "mesh": "mesh", "skeletons": "skeletons"
    }  # fmt: skip
    labels = label_shapes.labels()
    large = {s for s in label_shapes.SEGMENTS.values() if (labels == s).sum() >= 3000}
    report = api.verify(f"{url}/mesh", full=True)
    assert report.ok, report.problems
    assert f"{len(large)} segments over the dust threshold" in report.notes[0]


def test_levels_shardwright_added_are_made_again_only_with_overwrite(
    cloudvolume_dataset: pathlib.Path,
) -> None:
    """Without --overwrite, --mips adds above the levels shardwright added; with it, all of
    those are made again from the scale below them: a new level of the same resolution is
    written beside the old one (KEY-2), the info names the new ones in its one write, and
    only then are the old level's shards deleted. A third run takes the first key back.
    The dataset's own objects keep their bytes throughout; TensorStore reads each level as
    tinybrain's reduction; verify passes."""
    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    flags = ["--factor", "2,2,1", "--scheduler", "sync", "--quiet"]
    assert _cli("convert", url, "--mips", "1", *flags).returncode == 0
    above = api.plan(url, mips=1, factor=(2, 2, 1))
    assert [level.layout.level_key for level in above.new_levels] == ["32_32_16"]
    planned = _cli("convert", url, "--mips", "2", *flags, "--overwrite", "--dry-run")
    assert "replaces   level 16_16_16 shardwright added (--overwrite)" in planned.stdout
    plan_alone = api.plan(url, mips=2, factor=(2, 2, 1), overwrite=True)
    above_ours = _cli("convert", url, "--mips", "2", *flags)  # without --overwrite: above
    assert above_ours.returncode == 0, above_ours.stderr
    info = json.loads((cloudvolume_dataset / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16", "32_32_16", "64_64_16"]
    assert plan_alone.replaces == ("16_16_16",)

    done = _cli("convert", url, "--mips", "2", *flags, "--overwrite")
    assert done.returncode == 0, done.stderr
    info = json.loads((cloudvolume_dataset / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16-2", "32_32_16-2"]
    after = existing_datasets.object_crc32cs(url)
    assert existing_datasets.kept(before, after) == ["info"]  # the original's bytes
    left = [k for k in after if k.split("/")[0] in ("16_16_16", "32_32_16", "64_64_16")]
    assert left == [], left  # the replaced levels' shards are gone, nothing else of theirs
    want = _tinybrain_levels(label_shapes.labels(), (2, 2, 1), 2)
    for index, level in enumerate(want, start=1):
        assert np.array_equal(_read_scale(url, index)[..., 0], level), index
    report = api.verify(url, full=True)
    assert report.ok, report.problems

    again = _cli("convert", url, "--mips", "1", *flags, "--overwrite")
    assert again.returncode == 0, again.stderr
    info = json.loads((cloudvolume_dataset / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16"]
    assert not any(k.startswith(("16_16_16-2/", "32_32_16-2/"))
                   for k in existing_datasets.object_crc32cs(url))  # fmt: skip
    assert np.array_equal(_read_scale(url, 1)[..., 0], want[0])
    report = api.verify(url, full=True)
    assert report.ok, report.problems


def test_meshes_skeletons_and_segment_properties_in_one_job(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """All three added to another tool's dataset by one job: the table's document beside the
    meshes and skeletons, the info naming the three; a second table replaces only the
    document shardwright wrote; another tool's document is never replaced."""
    import pandas as pd

    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((cloudvolume_dataset / "info").read_text())
    cells = tmp_path / "cells.csv"
    ids = sorted(label_shapes.SEGMENTS.values())
    pd.DataFrame({"id": ids, "label": [f"cell {i}" for i in ids]}).to_csv(cells, index=False)
    done = _cli("convert", url, *QUIET, "--segment-properties", str(cells))
    assert done.returncode == 0, done.stderr
    info = json.loads((cloudvolume_dataset / "info").read_text())
    assert info == {**info_before, "mesh": "mesh", "skeletons": "skeletons",
                    "segment_properties": "segment_properties"}  # fmt: skip
    document = json.loads((cloudvolume_dataset / "segment_properties" / "info").read_text())
    assert document["inline"]["ids"] == [str(i) for i in ids]
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(url)) == ["info"]
    report = api.verify(url)
    assert report.ok and "segment_properties/info" in report.notes[-1], report
    pd.DataFrame({"id": [ids[0]], "label": ["renamed"]}).to_csv(cells, index=False)
    again = _cli("convert", url, "--segment-properties", str(cells), "--quiet")
    assert again.returncode == 0, again.stderr
    document = json.loads((cloudvolume_dataset / "segment_properties" / "info").read_text())
    assert document["inline"]["ids"] == [str(ids[0])] and api.verify(url).ok
    other = tmp_path / "other"
    label_shapes.write_precomputed(other)
    (other / "segment_properties").mkdir()
    (other / "segment_properties" / "info").write_text(
        '{"@type": "neuroglancer_segment_properties"}'
    )
    refused = _cli("convert", str(other), "--segment-properties", str(cells))
    assert refused.returncode == 2 and "shardwright did not write it" in refused.stderr


def _tinybrain_levels(labels: np.ndarray, factor: tuple[int, int, int], count: int) -> list:
    """tinybrain's mode reduction (Igneous's), level by level from `labels` ([x, y, z])."""
    tinybrain = pytest.importorskip("tinybrain")
    out = [labels]
    for _ in range(count):
        (level,) = tinybrain.downsample_segmentation(np.asfortranarray(out[-1]), factor)
        out.append(np.asarray(level))
    return out[1:]


def _read_scale(url: str, index: int) -> np.ndarray:
    import tensorstore as ts

    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": url},
            "scale_index": index}  # fmt: skip
    return np.asarray(ts.open(spec).result().read().result())


@pytest.mark.parametrize("writer", ["cloudvolume", "tensorstore"])
def test_levels_added_to_a_segmentation_equal_tinybrains(
    tmp_path: pathlib.Path, writer: str
) -> None:
    """Two levels above the only scale, 2,2,1: each, as TensorStore and CloudVolume read
    it, is tinybrain's mode reduction of the level below; the scale read keeps its bytes
    and its entry in the info; the new scales are sharded and listed after it."""
    from cloudvolume import CloudVolume

    path = tmp_path / writer
    if writer == "cloudvolume":
        label_shapes.write_precomputed(path)
    else:
        existing_datasets.write_tensorstore_sharded(path)
    url = str(path)
    before = existing_datasets.object_crc32cs(url)
    info_before = json.loads((path / "info").read_text())
    flags = ["--mips", "2", "--factor", "2,2,1", "--fill-missing", "--scheduler", "sync"]
    done = _cli("convert", url, *flags)
    assert done.returncode == 0, done.stderr
    assert "added 10 shards" in done.stdout and "levels 16_16_16, 32_32_16" in done.stdout
    info = json.loads((path / "info").read_text())
    assert info["scales"][0] == info_before["scales"][0]
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16", "32_32_16"]
    assert all(s["sharding"]["@type"] == "neuroglancer_uint64_sharded_v1"
               for s in info["scales"][1:])  # fmt: skip
    assert {k: v for k, v in info.items() if k != "scales"} == {
        k: v for k, v in info_before.items() if k != "scales"
    }
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(url)) == ["info"]
    expected = _tinybrain_levels(label_shapes.labels(), (2, 2, 1), 2)
    for index, want in enumerate(expected, start=1):
        assert np.array_equal(_read_scale(url, index)[..., 0], want), index
        read = CloudVolume(f"file://{url}", mip=index, progress=False, fill_missing=True)
        assert np.array_equal(np.asarray(read[:, :, :])[..., 0], want), index
    report = api.verify(url, full=True)
    assert report.ok and "level 16_16_16, level 32_32_16" in report.notes[-1], report


def test_a_level_added_to_an_image_is_its_average(tmp_path: pathlib.Path) -> None:
    """An image (raw uint8, CloudVolume) gains a level: the average reduction, as the
    reference written from the method's definition computes it."""

    from tests.support.downsampling_reference import reference

    image = np.random.default_rng(3).integers(0, 256, (96, 80, 40), dtype=np.uint8)
    label_shapes.write_precomputed(tmp_path / "em", image, (4, 4, 40), (32, 32, 16),
                                   layer_type="image", encoding="raw",
                                   voxel_offset=(10, 20, 3))  # fmt: skip
    url = str(tmp_path / "em")
    done = _cli("convert", url, "--mips", "1", "--factor", "2,2,1", "--quiet")
    assert done.returncode == 0, done.stderr
    scale = json.loads((tmp_path / "em" / "info").read_text())["scales"][1]
    assert (scale["key"], scale["resolution"], scale["voxel_offset"]) == ("8_8_40", [8, 8, 40],
                                                                           [5, 10, 3])  # fmt: skip
    want = reference(image[..., np.newaxis], (2, 2, 1), "average")
    assert np.array_equal(_read_scale(url, 1), want)
    assert api.verify(url, full=True).ok


def test_levels_meshes_skeletons_and_properties_in_one_job_on_our_dataset(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    import pandas as pd

    ours = tmp_path / "ours"
    assert _cli("convert", str(cloudvolume_dataset), str(ours), "--quiet").returncode == 0
    before = existing_datasets.object_crc32cs(str(ours))
    cells = tmp_path / "cells.csv"
    pd.DataFrame({"id": [11, 31], "label": ["ball", "tube"]}).to_csv(cells, index=False)
    done = _cli("convert", str(ours), *QUIET, "--mips", "1", "--segment-properties", str(cells))
    assert done.returncode == 0, done.stderr
    changed = existing_datasets.kept(before, existing_datasets.object_crc32cs(str(ours)))
    assert changed == ["info", "shardwright-manifest.json"]
    info = json.loads((ours / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16"]  # 2,2,1: z is twice x and y
    assert (info["mesh"], info["skeletons"], info["segment_properties"]) == (
        "mesh", "skeletons", "segment_properties"
    )  # fmt: skip
    (want,) = _tinybrain_levels(label_shapes.labels(), (2, 2, 1), 1)
    assert np.array_equal(_read_scale(str(ours), 1)[..., 0], want)
    report = api.verify(str(ours), str(cloudvolume_dataset), full=True)
    assert report.ok, report.problems
    shown = _cli("status", str(ours))
    assert "(addition): finished" in shown.stdout, shown.stdout


def test_a_killed_level_addition_resumes(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Killed after one level shard was stored: the info names no level yet; `--resume`
    keeps the proven shard and writes the rest."""
    url = str(cloudvolume_dataset)
    info_before = (cloudvolume_dataset / "info").read_bytes()
    flags = ["--mips", "2", "--factor", "2,2,1"]
    planned = api.plan(url, mips=2, factor=(2, 2, 1))
    total = sum(level.shard_count for level in planned.new_levels)
    _killed_at("shards:1", tmp_path / "paused", url, *flags)
    assert (cloudvolume_dataset / "info").read_bytes() == info_before
    stopped = shardwright.status(url)  # what the journal holds of its levels: what resume keeps
    assert stopped.state == "stopped" and stopped.levels == ["16_16_16", "32_32_16"]
    assert (stopped.shards_stored, stopped.shards_planned) == (1, total)
    assert f"shards       1 / {total} of its levels" in _cli("status", url).stdout
    done = _cli("convert", url, *flags, "--resume", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "(1 kept from an earlier run)" in done.stdout, done.stdout
    assert api.verify(url, full=True).ok
    finished = shardwright.status(url)
    assert finished.state == "finished" and finished.shards_stored == total


def test_levels_the_dataset_cannot_take_are_refused(cloudvolume_dataset: pathlib.Path) -> None:
    url = str(cloudvolume_dataset)
    before = existing_datasets.object_crc32cs(url)
    for flags, wording in [
        (["--mips", "9"], "--mips"),
        (["--mips", "1", "--factor", "1,1,1"], "downsampling factor must be"),
        (["--mips", "1", "--chunk-size", "16,16,16"], "--chunk-size shape a conversion's"),
    ]:
        done = _cli("convert", url, *flags)
        assert done.returncode == 2 and wording in done.stderr, (flags, done.stderr)
        assert "Traceback" not in done.stderr
    assert existing_datasets.object_crc32cs(url) == before
    for _ in range(2):  # each goes on from the coarsest scale: 2,2,1 by voxel size, then its own
        done = _cli("convert", url, "--mips", "1", "--quiet")
        assert done.returncode == 0, done.stderr
    info = json.loads((cloudvolume_dataset / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["8_8_16", "16_16_16", "32_32_16"]
    after = existing_datasets.object_crc32cs(url)
    assert existing_datasets.kept(before, after) == ["info"]
    assert api.verify(url, full=True).ok
    # A plan made without overwrite adds above them: run with overwrite, it is refused (one
    # that makes them again is planned with overwrite: test_levels_..._only_with_overwrite).
    with pytest.raises(DestinationError, match="levels 16_16_16, 32_32_16 were added"):
        api.convert(api.plan(url, mips=1), overwrite=True, scheduler="sync")
    replacing = api.plan(url, mips=1, overwrite=True)
    with pytest.raises(DestinationError, match="run it with overwrite=True"):
        api.convert(replacing, scheduler="sync")
    assert existing_datasets.object_crc32cs(url) == after


def test_a_level_whose_key_is_taken_is_refused(cloudvolume_dataset: pathlib.Path) -> None:
    """A dataset whose scale is keyed as the level above it would be (keys are names, not
    resolutions): refused, naming the key, before anything is written."""
    info = json.loads((cloudvolume_dataset / "info").read_text())
    info["scales"][0]["key"] = "16_16_16"
    (cloudvolume_dataset / "8_8_16").rename(cloudvolume_dataset / "16_16_16")
    (cloudvolume_dataset / "info").write_text(json.dumps(info))
    before = existing_datasets.object_crc32cs(str(cloudvolume_dataset))
    clash = _cli("convert", str(cloudvolume_dataset), "--mips", "1")
    assert clash.returncode == 2 and "scale '16_16_16' is there already" in clash.stderr
    assert existing_datasets.object_crc32cs(str(cloudvolume_dataset)) == before


def test_ctrl_c_stops_an_addition_in_one_line_and_it_resumes(
    cloudvolume_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """`status` says the addition runs; Ctrl-C stops it with the one line that names the
    command going on (`--resume`), its leases released and the info untouched."""
    url = str(cloudvolume_dataset)
    info_before = (cloudvolume_dataset / "info").read_bytes()
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "slow-blocks", str(tmp_path / "unused"), "convert", url,
         *ADD],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    spools = cloudvolume_dataset / "mesh" / ".shardwright" / "exchange"
    deadline = time.time() + 120
    try:
        while not (spools.is_dir() and len(list(spools.glob("block-*"))) >= 3):
            assert proc.poll() is None and time.time() < deadline, "the job ended first"
            time.sleep(0.02)
        shown = _cli("status", url)
        assert f"{url} (addition): running" in shown.stdout, shown.stdout
        assert "adds         mesh/, skeletons/" in shown.stdout, shown.stdout
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # a failed assertion leaves no job running behind the test
            proc.kill()
    assert proc.returncode == 130, stderr
    (said,) = stderr.strip().splitlines()
    assert said.startswith("shardwright convert: interrupted; stored so far: mesh/ blocks ")
    assert said.endswith("--resume`"), said
    assert not list((cloudvolume_dataset / ".shardwright").glob("lease-*"))
    assert (cloudvolume_dataset / "info").read_bytes() == info_before
    stopped = _cli("status", url)
    assert f"{url} (addition): stopped" in stopped.stdout, stopped.stdout
    done = _cli("convert", url, *QUIET, "--resume")
    assert done.returncode == 0, done.stderr
    assert api.verify(url, full=True).ok


def test_an_info_changed_on_disk_while_the_job_ran_is_not_overwritten(
    cloudvolume_dataset: pathlib.Path,
) -> None:
    url = str(cloudvolume_dataset)
    pending = api.convert(url, generate_meshes=True, mesh_block=(32, 32, 32), scheduler="sync",
                          progress=False, compute=False)  # fmt: skip
    assert isinstance(pending, api.PendingConversion)
    info = json.loads((cloudvolume_dataset / "info").read_text())
    edited = json.dumps({**info, "note": "a person's edit"})
    (cloudvolume_dataset / "info").write_text(edited)
    with pytest.raises(DestinationError, match="changed since this job read it"):
        pending.compute()
    assert (cloudvolume_dataset / "info").read_text() == edited
    assert not list((cloudvolume_dataset / ".shardwright").glob("lease-*"))


def _ome_zarr(path: pathlib.Path, levels: list[np.ndarray], label: bool) -> None:
    """An OME-Zarr 0.5 group as ome-zarr-py writes it: z, y, x in micrometres, each level
    half as fine in y and x, translated so voxel centres line up (the format's rule)."""
    import zarr
    from ome_zarr.format import FormatV05
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_multiscale

    voxel = [0.04, 0.008, 0.008]  # z, y, x
    origin = [1.2, 0.4, 0.8]
    transforms = []
    for k in range(len(levels)):
        scale = [voxel[0], voxel[1] * 2**k, voxel[2] * 2**k]
        shift = [o + (s - v) / 2 for o, s, v in zip(origin, scale, voxel, strict=True)]
        transforms.append([{"type": "scale", "scale": scale},
                           {"type": "translation", "translation": shift}])  # fmt: skip
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    fmt = FormatV05()
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store)
    write_multiscale(levels, root, axes=axes, fmt=fmt, coordinate_transformations=transforms,
                     storage_options={"chunks": (8, 32, 32)})  # fmt: skip
    if label:
        attributes = dict(root.attrs)
        attributes["ome"] = {**attributes["ome"], "image-label": {"version": "0.5"}}
        root.attrs.put(attributes)


@pytest.mark.parametrize("label", [False, True], ids=["image", "labels"])
def test_a_level_added_to_an_ome_zarr_group(tmp_path: pathlib.Path, label: bool) -> None:
    """An OME-Zarr 0.5 group (ome-zarr-py) of two levels gains a third: a Zarr v3 array
    `s2`, the group's datasets listing it after its own with the scale and translation the
    format's rule gives; ome-zarr-models validates the group, TensorStore and zarr-python read
    the new level as the reduction of level 1 (average for an image, tinybrain's mode for
    labels); every object the group had keeps its bytes but the group's zarr.json. With
    --overwrite, the levels shardwright added are made again beside the old (`s2-2`, then
    `s3`), the group names them in its one write, then the old array goes (was: refused); a
    third run takes the first name back."""
    import ome_zarr_models
    import tensorstore as ts
    import zarr

    from tests.support.downsampling_reference import reference

    rng = np.random.default_rng(5)
    if label:
        base = label_shapes.labels()[:, :, :32].T.astype(np.uint32)  # z, y, x
    else:
        base = rng.integers(0, 256, (32, 96, 128), dtype=np.uint8)
    level1 = np.ascontiguousarray(base[:, ::2, ::2])
    path = tmp_path / "image.ome.zarr"
    _ome_zarr(path, [base, level1], label)
    before = existing_datasets.object_crc32cs(str(path))
    group_before = json.loads((path / "zarr.json").read_text())
    done = _cli("convert", str(path), "--mips", "1", "--factor", "2,2,1", "--quiet")
    assert done.returncode == 0, done.stderr
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(path))) == [
        "zarr.json"
    ]
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(path), mode="r"))
    group = json.loads((path / "zarr.json").read_text())
    (multiscale,) = group["attributes"]["ome"]["multiscales"]
    (old,) = group_before["attributes"]["ome"]["multiscales"]
    assert multiscale["datasets"][:2] == old["datasets"]
    assert multiscale["axes"] == old["axes"]
    added = multiscale["datasets"][2]
    scale, shift = (t[t["type"]] for t in added["coordinateTransformations"])
    assert added["path"] == "s2"  # named as ome-zarr-py names its levels
    assert scale == pytest.approx([0.04, 0.032, 0.032])
    assert shift == pytest.approx([1.2, 0.4 + 0.012, 0.8 + 0.012])
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / "s2")}}
    read = np.asarray(ts.open(spec).result().read().result())
    if label:
        want = _tinybrain_levels(level1.T, (2, 2, 1), 1)[0].T
    else:
        want = reference(level1.T[..., np.newaxis], (2, 2, 1), "average")[..., 0].T
    assert np.array_equal(read, want)
    assert np.array_equal(zarr.open_array(str(path / "s2"), mode="r")[...], want)
    assert api.verify(str(path), full=True).ok

    def paths() -> list[str]:
        group = json.loads((path / "zarr.json").read_text())
        return [d["path"] for d in group["attributes"]["ome"]["multiscales"][0]["datasets"]]

    def level(name: str) -> np.ndarray:
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / name)}}
        return np.asarray(ts.open(spec).result().read().result())

    again = _cli("convert", str(path), "--mips", "2", "--factor", "2,2,1", "--overwrite",
                 "--quiet")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert paths() == ["s0", "s1", "s2-2", "s3"]
    assert not (path / "s2").exists()  # the replaced array, and nothing else, is gone
    after = existing_datasets.object_crc32cs(str(path))
    assert existing_datasets.kept(before, after) == ["zarr.json"]
    ome_zarr_models.open_ome_zarr(zarr.open_group(str(path), mode="r"))
    assert np.array_equal(level("s2-2"), want)
    if label:
        (top,) = _tinybrain_levels(want.T, (2, 2, 1), 1)
    else:
        top = reference(want.T[..., np.newaxis], (2, 2, 1), "average")[..., 0]
    assert np.array_equal(level("s3"), top.T)
    assert api.verify(str(path), full=True).ok
    third = _cli("convert", str(path), "--mips", "1", "--factor", "2,2,1", "--overwrite",
                 "--quiet")  # fmt: skip
    assert third.returncode == 0, third.stderr
    assert paths() == ["s0", "s1", "s2"] and np.array_equal(level("s2"), want)
    assert not (path / "s2-2").exists() and not (path / "s3").exists()
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(path))) == [
        "zarr.json"]  # fmt: skip
    assert api.verify(str(path), full=True).ok


def test_a_group_whose_level_was_made_again_gains_levels_numbered_on(
    tmp_path: pathlib.Path,
) -> None:
    """A group whose datasets are s0, s1, s2-2 (level 2 made again beside the one it replaced)
    is numbered in order: a level added above is s3, zarr-python reads it as the reduction of
    s2-2; datasets out of order are refused."""
    import zarr

    from tests.support.downsampling_reference import reference

    path = tmp_path / "group.ome.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    base = np.random.default_rng(7).integers(0, 256, (8, 64, 64), dtype=np.uint8)  # z, y, x
    datasets = []
    for k, name in enumerate(["s0", "s1", "s2-2"]):
        level = base[:, :: 2**k, :: 2**k]
        group.create_array(name, shape=level.shape, chunks=level.shape, dtype=level.dtype)[...] = (
            level)  # fmt: skip
        scale, shift = [40, 8 * 2**k, 8 * 2**k], [0, 4 * (2**k - 1), 4 * (2**k - 1)]
        datasets.append({"path": name, "coordinateTransformations": [
            {"type": "scale", "scale": scale},
            {"type": "translation", "translation": shift}]})  # fmt: skip
    group.attrs["ome"] = {"version": "0.5", "multiscales": [{
        "axes": [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"],
        "datasets": datasets}]}  # fmt: skip
    plan = api.plan(str(path), mips=1, factor=(2, 2, 1))
    assert [level.layout.level_key for level in plan.new_levels] == ["s3"]
    api.convert(plan, scheduler="sync", progress=False)
    level2 = base[:, ::4, ::4]
    want = reference(level2.T[..., np.newaxis], (2, 2, 1), "average")[..., 0].T
    assert np.array_equal(zarr.open_array(str(path / "s3"), mode="r")[...], want)
    assert api.verify(str(path), full=True).ok
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["ome"]["multiscales"][0]["datasets"][2]["path"] = "s3-2"
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(PlanError, match="numbered in order"):
        api.plan(str(path), mips=1, factor=(2, 2, 1))


def test_a_level_folder_holding_another_tools_objects_is_refused(
    cloudvolume_dataset: pathlib.Path,
) -> None:
    """A folder where a new level would go, not named by the info (left by another run of
    another tool): refused, its object untouched; a stopped addition's own level shards
    there are no obstacle to `--resume` (test_a_killed_level_addition_resumes)."""
    stray = cloudvolume_dataset / "16_16_16" / "0.shard"
    stray.parent.mkdir()
    stray.write_bytes(b"someone else's")
    before = existing_datasets.object_crc32cs(str(cloudvolume_dataset))
    done = _cli("convert", str(cloudvolume_dataset), "--mips", "1")
    assert done.returncode == 2, done.stderr
    assert "16_16_16/0.shard is there and shardwright did not write it" in done.stderr
    assert existing_datasets.object_crc32cs(str(cloudvolume_dataset)) == before


def test_a_compresso_segmentation_gains_meshes_and_a_compressed_segmentation_level(
    tmp_path: pathlib.Path,
) -> None:
    """CloudVolume's compresso encoding, read through its package: the dataset gains
    meshes and a level; the level is written in compressed_segmentation (shardwright writes
    no compresso), tinybrain's reduction of the scale below."""
    pytest.importorskip("compresso")
    from cloudvolume import CloudVolume

    labels = label_shapes.labels()
    path = tmp_path / "compresso"
    label_shapes.write_precomputed(path, labels, encoding="compresso")
    before = existing_datasets.object_crc32cs(str(path))
    done = _cli("convert", str(path), "--generate-meshes", "--mesh-block", "64,64,64",
                "--mips", "1", "--factor", "2,2,1", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert existing_datasets.kept(before, existing_datasets.object_crc32cs(str(path))) == ["info"]
    scale = json.loads((path / "info").read_text())["scales"][1]
    assert scale["encoding"] == "compressed_segmentation"
    (want,) = _tinybrain_levels(labels, (2, 2, 1), 1)
    level = CloudVolume(f"file://{path}", mip=1, progress=False)  # TensorStore reads no compresso
    assert np.array_equal(np.asarray(level[:, :, :])[..., 0], want)
    assert api.verify(str(path), full=True).ok
