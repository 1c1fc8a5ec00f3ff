"""Meshes and skeletons made from a segmentation in the conversion's own job
(--generate-meshes, --generate-skeletons): read back by CloudVolume, measured against zmesh
and kimimaro run on the whole volume, verified, the same objects on every scheduler and after
a kill and --resume."""

from __future__ import annotations

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

from shardwright import api
from shardwright.errors import PlanError
from shardwright.formats.precomputed.meshes import MultiLodManifest
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.generation.surfaces import lod_count
from shardwright.generation.tracing import Tracing
from shardwright.options import ConvertOptions
from shardwright.stores import open_store
from tests.support import SUPPORT, label_shapes

zmesh = pytest.importorskip("zmesh")
kimimaro = pytest.importorskip("kimimaro")
pytest.importorskip("cloudvolume")

BLOCK = (32, 32, 32)
OPTIONS = ["--generate-meshes", "--generate-skeletons", "--mesh-block", "32,32,32", "--quiet"]
DRIVER = SUPPORT / "lifecycle_driver.py"
ELONGATED = ("tube", "bent", "box")  # TEASAR's skeleton of a ball depends on where it is cut


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True
    )


def _objects(dest: pathlib.Path) -> dict[tuple[str, int], bytes]:
    """Every segment's stored object as a reader gets it: a skeleton, or a mesh's manifest
    with the fragment data before it. (Shard bytes may differ run to run where gzip is
    ISA-L's: docs/architecture.md.)"""
    out = {}
    for sub in ("mesh", "skeletons"):
        info = json.loads((dest / sub / "info").read_text())
        reader = ShardedReader(ShardingSpec.from_json(info["sharding"]),
                               open_store(str(dest / sub)).read_range)  # fmt: skip
        for segment in label_shapes.SEGMENTS.values():
            blob = reader.read(segment)
            assert blob is not None, (sub, segment)
            if sub == "mesh":
                key, start, _ = reader.locate(segment)  # type: ignore[misc]
                size = MultiLodManifest.from_bytes(blob).data_nbytes
                blob = (dest / sub / key).read_bytes()[start - size : start] + blob
            out[(sub, segment)] = blob
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pathlib.Path]:
    """The label volume (CloudVolume-written) converted once on the default scheduler."""
    root = tmp_path_factory.mktemp("generated")
    source = label_shapes.write_precomputed(root / "labels")
    dest = root / "out"
    done = _cli("convert", source, str(dest), *OPTIONS)
    assert done.returncode == 0, done.stderr
    return source, dest


@pytest.fixture(scope="module")
def whole_volume() -> tuple[dict[int, object], dict[int, object]]:
    """zmesh's unsimplified surfaces (closed at the dataset's edges) and kimimaro's skeletons
    of the whole volume."""
    labels = label_shapes.labels()
    mesher = zmesh.Mesher(label_shapes.RESOLUTION)
    mesher.mesh(labels, close=True)
    ids = label_shapes.SEGMENTS.values()
    surfaces = {}
    for i in ids:  # close=True pads the volume: its positions are one voxel high
        mesh = mesher.get(i, normals=False, reduction_factor=0, max_error=0, voxel_centered=True)
        mesh.vertices = mesh.vertices - np.float32(label_shapes.RESOLUTION)
        surfaces[i] = mesh
    skeletons = kimimaro.skeletonize(
        labels, teasar_params=Tracing().params(), anisotropy=label_shapes.RESOLUTION,
        dust_threshold=0, progress=False,
    )  # fmt: skip
    return surfaces, skeletons


def _mesh(volume: Any, segment: int, lod: int) -> Any:
    """One segment's mesh at one level of detail, as CloudVolume reads it."""
    got = volume.mesh.get(segment, lod=lod)
    return got[segment] if isinstance(got, dict) else got


def _area(vertices: np.ndarray, faces: np.ndarray) -> float:
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    return float(0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]),
                                      axis=1).sum())  # fmt: skip


def test_every_segment_has_a_mesh_close_to_the_whole_volume_surface(
    converted: tuple[str, pathlib.Path], whole_volume: tuple[dict, dict]
) -> None:
    from cloudvolume import CloudVolume

    _, dest = converted
    surfaces, _ = whole_volume
    volume = CloudVolume(f"file://{dest}", progress=False)
    largest = max(label_shapes.RESOLUTION)
    labels = label_shapes.labels()
    for name, segment in label_shapes.SEGMENTS.items():
        mesh = _mesh(volume, segment, 0)
        full = surfaces[segment]
        ratio = _area(mesh.vertices, mesh.faces) / _area(full.vertices, full.faces)
        assert 0.95 <= ratio <= 1.05, (name, ratio)
        low, high = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
        assert np.abs(low - full.vertices.min(axis=0)).max() <= largest, name
        assert np.abs(high - full.vertices.max(axis=0)).max() <= largest, name
        where = np.argwhere(labels == segment)  # the segment's own box, in nm
        box_low = where.min(axis=0) * label_shapes.RESOLUTION - largest
        box_high = (where.max(axis=0) + 1) * label_shapes.RESOLUTION + largest
        assert (mesh.vertices >= box_low).all() and (mesh.vertices <= box_high).all(), name
        assert len(mesh.vertices) < len(full.vertices), name  # simplified


def test_each_mesh_has_the_documented_levels_of_detail(
    converted: tuple[str, pathlib.Path],
) -> None:
    """auto: levels until one fragment covers the segment's blocks; every level's fragments
    decode (CloudVolume), the coarsest is one fragment."""
    from cloudvolume import CloudVolume

    _, dest = converted
    info = json.loads((dest / "mesh" / "info").read_text())
    spec = ShardingSpec.from_json(info["sharding"])
    store = open_store(str(dest / "mesh"))
    reader = ShardedReader(spec, store.read_range)
    volume = CloudVolume(f"file://{dest}", progress=False)
    labels = label_shapes.labels()
    for name, segment in label_shapes.SEGMENTS.items():
        blocks = np.unique(np.argwhere(labels == segment) // BLOCK, axis=0)
        manifest = MultiLodManifest.from_bytes(reader.read(segment))
        assert manifest.num_lods == lod_count(blocks), name
        assert manifest.fragment_positions[-1].shape[1] == 1, name
        for lod in range(manifest.num_lods):
            mesh = _mesh(volume, segment, lod)
            assert len(mesh.faces) > 0, (name, lod)


def test_skeletons_follow_the_whole_volume_skeletons(
    converted: tuple[str, pathlib.Path], whole_volume: tuple[dict, dict]
) -> None:
    from cloudvolume import CloudVolume

    _, dest = converted
    _, skeletons = whole_volume
    volume = CloudVolume(f"file://{dest}", progress=False)
    for name, segment in label_shapes.SEGMENTS.items():
        skeleton = volume.skeleton.get(segment)
        assert len(skeleton.components()) == 1, name  # joined across blocks
        assert (skeleton.radius > 0).all(), name
        if name in ELONGATED:
            ratio = skeleton.cable_length() / skeletons[segment].cable_length()
            assert 0.85 <= ratio <= 1.15, (name, ratio)


def test_the_job_verifies_and_leaves_no_intermediates(converted: tuple[str, pathlib.Path]) -> None:
    source, dest = converted
    info = json.loads((dest / "info").read_text())
    assert (info["mesh"], info["skeletons"]) == ("mesh", "skeletons")
    assert api.verify(str(dest), source, full=True).ok
    for sub in ("mesh", "skeletons"):
        report = api.verify(str(dest / sub), full=True)
        assert report.ok, report.problems
        assert not (dest / sub / ".shardwright" / "exchange").exists()
        assert not list((dest / sub / ".shardwright" / "receipts").rglob("block-*"))
    assert _cli("verify", str(dest / "mesh")).returncode == 0
    shown = _cli("status", str(dest / "mesh"))
    assert shown.returncode == 0 and "finished" in shown.stdout and "(100.0 %)" in shown.stdout


@pytest.mark.parametrize("scheduler", ["processes", "threads"])
def test_every_scheduler_writes_the_same_objects(
    converted: tuple[str, pathlib.Path], tmp_path: pathlib.Path, scheduler: str
) -> None:
    """The default (a local cluster of worker processes, meshing holding the GIL), one
    process per core, and threads of one process."""
    source, dest = converted
    again = tmp_path / "again"
    done = _cli("convert", source, str(again), *OPTIONS, "--scheduler", scheduler)
    assert done.returncode == 0, done.stderr
    assert _objects(again) == _objects(dest)


def test_a_killed_job_resumes_to_the_same_objects(
    converted: tuple[str, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """Killed (the whole process group) after some block spools were journaled: --resume
    keeps them and writes what an uninterrupted job writes."""
    source, dest = converted
    resumed = tmp_path / "resumed"
    marker = tmp_path / "paused"
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "shards:10", str(marker), "convert", source,
         str(resumed), *OPTIONS, "--scheduler", "sync"],
        start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, "the job never paused"
        time.sleep(0.05)
    shown = _cli("status", str(resumed / "mesh"))  # its blocks counted apart from its shards
    assert shown.returncode == 0 and "running" in shown.stdout, shown.stdout
    blocks = re.search(r"blocks\s+(\d+) / 24 ", shown.stdout)
    assert blocks is not None and 0 < int(blocks[1]) <= 10, shown.stdout
    assert re.search(r"shards\s+\d+ / \d+ estimated", shown.stdout), shown.stdout
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list((resumed / "mesh" / ".shardwright" / "exchange").glob("block-*"))
    done = _cli("convert", source, str(resumed), *OPTIONS, "--resume")
    assert done.returncode == 0, done.stderr
    assert f"kept {blocks[1]} of 24 blocks from an earlier run (not made again)" in done.stdout
    assert _objects(resumed) == _objects(dest)
    assert api.verify(str(resumed / "mesh"), full=True).ok
    for sub in ("mesh", "skeletons"):  # every segment counted, and each with its object
        report = api.verify(str(resumed / sub))
        assert report.ok, report.problems
        assert f"{len(label_shapes.SEGMENTS)} segments over the dust threshold" in report.notes[0]


def test_object_ids_and_dust_threshold_choose_the_segments(tmp_path: pathlib.Path) -> None:
    source = label_shapes.write_precomputed(tmp_path / "labels")
    tube, bent = label_shapes.SEGMENTS["tube"], label_shapes.SEGMENTS["bent"]
    dest = tmp_path / "some"
    options = ["--mesh-block", "64,64,32", "--scheduler", "sync", "--quiet"]
    done = _cli("convert", source, str(dest), "--generate-meshes", *options,
                "--object-ids", f"{tube},{bent}", "--dust-threshold", "2000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = label_shapes.labels()
    assert (labels == tube).sum() > 2000 > (labels == bent).sum()  # the test's premise
    info = json.loads((dest / "mesh" / "info").read_text())
    reader = ShardedReader(
        ShardingSpec.from_json(info["sharding"]), open_store(str(dest / "mesh")).read_range
    )
    found = reader.read_many(list(label_shapes.SEGMENTS.values()))
    assert {s for s, blob in found.items() if blob is not None} == {tube}
    assert not (dest / "skeletons").exists()
    assert "skeletons" not in json.loads((dest / "info").read_text())


@pytest.mark.parametrize(
    ("options", "wording"),
    [
        ({"layer_type": "image"}, "need a segmentation"),
        ({"format": "zarr3"}, "beside a precomputed volume"),
        ({"mesh_level": 2}, "mesh_level 2: the volume has 1 level"),
        ({"with_meshes": True}, "both would write the same directory"),
        ({"memory_budget": 16 * 1024**2, "mesh_block": (128, 96, 64)}, "more than memory_budget"),
    ],
)
def test_what_cannot_be_generated_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, options: dict, wording: str
) -> None:
    source = label_shapes.write_precomputed(tmp_path / "labels")
    dest = tmp_path / "refused"
    with pytest.raises(PlanError, match=wording):
        api.plan(source, str(dest), ConvertOptions(generate_meshes=True, **options))
    assert not dest.exists()


def test_plan_shows_both_datasets_their_sharding_and_the_spools(tmp_path: pathlib.Path) -> None:
    source = label_shapes.write_precomputed(tmp_path / "labels")
    shown = _cli("plan", source, str(tmp_path / "out"), *OPTIONS[:-1])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert f"generated    {tmp_path / 'out' / 'mesh'}: multi-resolution meshes" in text
    assert f"generated    {tmp_path / 'out' / 'skeletons'}: TEASAR skeletons" in text
    assert "24 blocks of 32 x 32 x 32" in text  # 4 x 3 x 2
    assert text.count("sharding   murmurhash3_x86_128") == 2
    assert text.count("present (estimated from sampled blocks), each gets its") == 2
    assert "one spool object per block" in text and "removed after the manifests" in text
    assert not (tmp_path / "out").exists()


def test_bad_generation_flags_are_one_clear_error(tmp_path: pathlib.Path) -> None:
    source = label_shapes.write_precomputed(tmp_path / "labels")
    for flags, wording in [
        (["--object-ids", "12,x"], "expected segment ids"),
        (["--mesh-lods", "none"], "expected a number of levels"),
        (["--mesh-block", "32,32"], "expected three values"),
        (["--mesh-block", "1,32,32"], "must be three whole numbers of 2 or more"),
    ]:
        done = _cli("convert", source, str(tmp_path / "out"), "--generate-meshes", *flags)
        assert done.returncode == 2, (flags, done.stderr)
        assert wording in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_meshes_from_an_upper_pyramid_level(tmp_path: pathlib.Path) -> None:
    """--mesh-level 1 meshes the mode-reduced level of the pyramid the job builds: coarser
    surfaces in the same place (bounding boxes within one voxel of that level)."""
    from cloudvolume import CloudVolume

    source = label_shapes.write_precomputed(tmp_path / "labels")
    dest = tmp_path / "coarse"
    flags = ["--mips", "1", "--factor", "2,2,1", "--generate-meshes", "--mesh-level", "1"]
    done = _cli("convert", source, str(dest), *flags, "--scheduler", "sync", "--quiet")
    assert done.returncode == 0, done.stderr
    assert api.verify(str(dest / "mesh"), full=True).ok
    volume = CloudVolume(f"file://{dest}", progress=False)
    mesher = zmesh.Mesher(label_shapes.RESOLUTION)
    mesher.mesh(label_shapes.labels())
    coarse_voxel = np.multiply(label_shapes.RESOLUTION, (2, 2, 1))
    for name, segment in label_shapes.SEGMENTS.items():
        mesh = _mesh(volume, segment, 0)
        fine = mesher.get(segment, normals=False, reduction_factor=0, max_error=0,
                          voxel_centered=True)  # fmt: skip
        low, high = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
        assert (np.abs(low - fine.vertices.min(axis=0)) <= coarse_voxel).all(), name
        assert (np.abs(high - fine.vertices.max(axis=0)) <= coarse_voxel).all(), name


def test_generated_into_an_s3_bucket_match_the_local_ones(
    converted: tuple[str, pathlib.Path], s3: Any, tmp_path: pathlib.Path
) -> None:
    """Spools, ranged reads of them and the shards through a real S3 server (moto): the same
    objects as on local disk, and no spool left in the bucket."""
    source, local = converted
    s3.make_bucket("generated")
    dest = "s3://generated/seg"
    api.convert(
        source, dest, generate_meshes=True, generate_skeletons=True, mesh_block=BLOCK,
        storage_options=s3.options(), progress=False,
    )  # fmt: skip
    fetched = tmp_path / "fetched"
    for sub in ("mesh", "skeletons"):
        store = open_store(f"{dest}/{sub}", s3.options())
        assert not store.list_keys(".shardwright/exchange")
        assert api.verify(f"{dest}/{sub}", full=True, storage_options=s3.options()).ok
        (fetched / sub).mkdir(parents=True)
        for key in store.list_keys():
            if not key.startswith(".shardwright/"):
                (fetched / sub / key).write_bytes(store.read(key))
    assert _objects(fetched) == _objects(local)
