"""Every segment of a segmentation gets its mesh and a skeleton with an edge
(--generate-meshes, --generate-skeletons), read back by CloudVolume: objects of one voxel,
thin lines and small cubes that simplification used to delete; blobs and demo cells whose
pieces welded across block faces closed a loop kimimaro deleted whole. And `verify` counts
them: a deleted or emptied mesh or skeleton fails it, naming the segment and the object."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from shardwright import api
from shardwright.cli.demo import write_demo_volumes
from shardwright.formats.precomputed.meshes import MultiLodManifest
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import ShardBuilder, ShardingSpec
from shardwright.formats.precomputed.skeletons import encode_skeleton
from shardwright.stores import open_store
from tests.support import label_shapes

zmesh = pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")
pytest.importorskip("cloudvolume")

BOTH = ["--generate-meshes", "--generate-skeletons", "--scheduler", "threads"]


def _convert(source: str, dest: pathlib.Path, *flags: str) -> str:
    """`convert` from the command line; its summary (stdout)."""
    done = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", source, str(dest), *flags],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _area(vertices: np.ndarray, faces: np.ndarray) -> float:
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64).reshape(-1, 3)
    return float(0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]),
                                      axis=1).sum())  # fmt: skip


def _inside_box(points: np.ndarray, labels: np.ndarray, segment: int, resolution: tuple) -> bool:
    """Whether every point (nm) lies within the segment's voxels grown by one voxel."""
    where = np.argwhere(labels == segment)
    res = np.asarray(resolution, np.float64)
    low, high = (where.min(axis=0) - 1) * res, (where.max(axis=0) + 2) * res
    return bool(((points >= low) & (points <= high)).all())


def _lods(dest: pathlib.Path, segment: int) -> int:
    info = json.loads((dest / "mesh" / "info").read_text())
    reader = ShardedReader(ShardingSpec.from_json(info["sharding"]),
                           open_store(str(dest / "mesh")).read_range)  # fmt: skip
    blob = reader.read(segment)
    assert blob is not None, segment
    return MultiLodManifest.from_bytes(blob).num_lods


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pathlib.Path, str]:
    """The tiny objects converted with both outputs on blocks of 16 x 16 x 4 voxels."""
    root = tmp_path_factory.mktemp("tiny")
    source = label_shapes.write_precomputed(
        root / "labels", label_shapes.tiny_objects(), label_shapes.TINY_RESOLUTION, (16, 16, 8)
    )
    dest = root / "out"
    summary = _convert(source, dest, *BOTH, "--mesh-block", "16,16,4")
    return source, dest, summary


def test_every_tiny_object_keeps_its_surface_at_every_level_of_detail(
    tiny: tuple[str, pathlib.Path, str],
) -> None:
    """The default bound (half the smallest voxel side) used to delete all but the cube; now
    none loses its mesh or a tenth of its unsimplified area (zmesh on the whole volume), every
    level of detail has triangles, and the summary counts them all."""
    from cloudvolume import CloudVolume

    _, dest, summary = tiny
    labels = label_shapes.tiny_objects()
    ids = [int(i) for i in np.unique(labels) if i]
    assert f"{len(ids)} segments of {len(ids)} present" in summary  # meshes and skeletons
    assert summary.count(f"{len(ids)} segments of {len(ids)} present") == 2
    mesher = zmesh.Mesher(label_shapes.TINY_RESOLUTION)
    mesher.mesh(labels, close=True)
    volume = CloudVolume(f"file://{dest}", progress=False)
    for segment in ids:
        whole = mesher.get(segment, normals=False, reduction_factor=0, max_error=0,
                           voxel_centered=True)  # fmt: skip
        whole_vertices = whole.vertices - np.float32(label_shapes.TINY_RESOLUTION)  # padded
        for lod in range(_lods(dest, segment)):
            mesh = volume.mesh.get(segment, lod=lod)[segment]
            assert len(mesh.faces) > 0, (segment, lod)
            if lod == 0:
                ratio = _area(mesh.vertices, mesh.faces) / _area(whole_vertices, whole.faces)
                assert 0.9 <= ratio <= 1.01, (segment, ratio)
                assert _inside_box(mesh.vertices, labels, segment, label_shapes.TINY_RESOLUTION)
                spread = np.abs(mesh.vertices.max(axis=0) - whole_vertices.max(axis=0))
                assert (spread <= label_shapes.TINY_RESOLUTION).all(), segment
        skeleton = volume.skeleton.get(segment)
        assert len(skeleton.edges) >= 1, segment
        assert _inside_box(skeleton.vertices, labels, segment, label_shapes.TINY_RESOLUTION)
    assert _lods(dest, label_shapes.CROSSING_LINE) == 2  # across a block border


def test_no_blob_loses_its_skeleton_where_blocks_meet(tmp_path: pathlib.Path) -> None:
    """Blob 7 lies around the line four blocks share: each block's piece joined two of its
    faces, the welded pieces closed a loop and kimimaro's loop removal left no edge. Opened
    at a face instead, it keeps most of the cable kimimaro traces in the whole volume (a
    ball's skeleton depends on where it is cut), and the other blobs keep theirs."""
    import kimimaro
    from cloudvolume import CloudVolume

    from shardwright.generation.tracing import Tracing

    labels = label_shapes.blobs()
    source = label_shapes.write_precomputed(tmp_path / "labels", labels,
                                            label_shapes.BLOB_RESOLUTION)  # fmt: skip
    dest = tmp_path / "out"
    summary = _convert(source, dest, "--generate-skeletons", "--mesh-block", "32,32,32",
                       "--scheduler", "threads")  # fmt: skip
    count = len(label_shapes.BLOBS)
    assert f"{count} segments of {count} present" in summary
    whole = kimimaro.skeletonize(
        labels, teasar_params=Tracing().params(), dust_threshold=0,
        anisotropy=label_shapes.BLOB_RESOLUTION, progress=False,
    )  # fmt: skip
    volume = CloudVolume(f"file://{dest}", progress=False)
    for segment in label_shapes.BLOBS:
        skeleton = volume.skeleton.get(segment)
        assert len(skeleton.edges) >= 1, segment
        assert len(skeleton.components()) == 1, segment
        assert _inside_box(skeleton.vertices, labels, segment, label_shapes.BLOB_RESOLUTION)
        ratio = skeleton.cable_length() / whole[segment].cable_length()
        assert (0.7 if segment == 7 else 0.85) <= ratio <= 1.15, (segment, ratio)


def test_a_cut_out_of_the_demo_keeps_every_skeleton(tmp_path: pathlib.Path) -> None:
    """The demo's cells on blocks of 64 x 64 x 16 (one of them used to end with no edge, one
    with no skeleton): every cell has a skeleton with an edge, and verify finds them all."""
    from cloudvolume import CloudVolume

    labels_path = tmp_path / "labels.npy"
    write_demo_volumes((128, 128, 32), None, str(labels_path))
    dest = tmp_path / "out"
    _convert(str(labels_path), str(dest), "--resolution", "8,8,40", "--layer-type",
             "segmentation", "--generate-skeletons", "--mesh-block", "64,64,16",
             "--scheduler", "threads")  # fmt: skip
    ids = [int(i) for i in np.unique(np.load(labels_path)) if i]
    volume = CloudVolume(f"file://{dest}", progress=False)
    empty = [s for s in ids if len(volume.skeleton.get(s).edges) == 0]
    assert not empty
    report = api.verify(str(dest / "skeletons"), full=True)
    assert report.ok, report.problems
    assert f"{len(ids):,} segments over the dust threshold in the volume" in report.notes[0]


# -- verify ----------------------------------------------------------------------------------


def _rewrite(sub: pathlib.Path, segment: int, ids: list[int], change: str) -> None:
    """Store the shard holding `segment` again, without its object ("deleted") or with an
    object of no geometry ("emptied"): a mesh manifest listing no fragment at any level of
    detail, a skeleton of no vertex and no edge."""
    info = json.loads((sub / "info").read_text())
    spec = ShardingSpec.from_json(info["sharding"])
    reader = ShardedReader(spec, open_store(str(sub)).read_range)
    shard = int(spec.locate(np.array([segment], np.uint64))[0][0])
    builder = ShardBuilder(spec, shard, memory_budget=2**26)
    for other in ids:
        where = reader.locate(other)
        if where is None or int(spec.locate(np.array([other], np.uint64))[0][0]) != shard:
            continue
        blob = reader.read(other)
        assert blob is not None
        prefix = b""
        if info["@type"] == "neuroglancer_multilod_draco":
            size = MultiLodManifest.from_bytes(blob).data_nbytes
            prefix = (sub / where[0]).read_bytes()[where[1] - size : where[1]]
        if other == segment and change == "deleted":
            continue
        if other == segment and prefix:
            mesh = MultiLodManifest.from_bytes(blob)
            none = tuple(np.zeros(0, np.uint32) for _ in range(mesh.num_lods))
            blob = MultiLodManifest(
                mesh.chunk_shape,
                mesh.grid_origin,
                mesh.lod_scales,
                mesh.vertex_offsets,
                tuple(np.zeros((3, 0), np.uint32) for _ in none),
                none,
            ).to_bytes()
            prefix = b""  # fmt: skip
        elif other == segment:
            blob = encode_skeleton(np.zeros((0, 3)), np.zeros((0, 2)), [np.zeros(0, np.float32)])
        builder.add(other, blob, prefix=prefix)
    (sub / spec.shard_filename(shard)).write_bytes(builder.finish().to_bytes())


@pytest.fixture(scope="module")
def blob_job(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("blobs")
    source = label_shapes.write_precomputed(root / "labels", label_shapes.blobs(),
                                            label_shapes.BLOB_RESOLUTION)  # fmt: skip
    _convert(source, root / "out", *BOTH, "--mesh-block", "32,32,32")
    return root / "out"


def test_verify_counts_every_object_of_a_fresh_job(blob_job: pathlib.Path) -> None:
    count = len(label_shapes.BLOBS)
    for full in (False, True):
        for sub, what in (("mesh", "mesh"), ("skeletons", "skeleton")):
            report = api.verify(str(blob_job / sub), full=full)
            assert report.ok, report.problems
            assert f"{count} segments over the dust threshold" in report.notes[0]
            assert f"{count} with a {what}; {count} decoded" in report.notes[0]
        whole = api.verify(str(blob_job), full=full)  # the volume and what was made beside it
        assert whole.ok, whole.problems
        counts = [n for n in whole.notes if " segments over the dust threshold " in n]
        assert sorted(n.partition("/")[0] for n in counts) == ["mesh", "skeletons"]
        quality = [n for n in whole.notes if n.startswith("skeletons/: skeleton cable against")]
        assert len(quality) == (1 if full else 0)  # --full measures the skeletons too


@pytest.mark.parametrize(
    ("sub", "change", "wording"),
    [
        ("mesh", "deleted", "segment 7: no mesh"),
        ("mesh", "emptied", "segment 7: its mesh has no triangles at level of detail 0"),
        ("skeletons", "deleted", "segment 7: no skeleton"),
        ("skeletons", "emptied", "segment 7: its skeleton has no edges (0 vertices)"),
    ],
)
def test_verify_names_a_deleted_or_emptied_object(
    blob_job: pathlib.Path, tmp_path: pathlib.Path, sub: str, change: str, wording: str
) -> None:
    """Read from the job's census by default, from the volume with full; from the volume's
    own verify, named by the directory."""
    dest = tmp_path / "out"
    shutil.copytree(blob_job, dest)
    _rewrite(dest / sub, 7, list(label_shapes.BLOBS), change)
    for full in (False, True):
        report = api.verify(str(dest / sub), full=full)
        assert not report.ok
        assert any(p.startswith(wording) for p in report.problems), report.problems
        whole = api.verify(str(dest), full=full)
        assert any(p.startswith(f"{sub}/: {wording}") for p in whole.problems), whole.problems
    done = subprocess.run([sys.executable, "-m", "shardwright.cli", "verify", str(dest / sub)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1 and wording in done.stdout


def test_verify_notices_a_census_table_gone(blob_job: pathlib.Path, tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    shutil.copytree(blob_job, dest)
    tables = sorted((dest / "mesh" / ".shardwright" / "census").rglob("*.shard"))
    assert tables
    tables[0].unlink()
    report = api.verify(str(dest / "mesh"))
    assert any("census lists" in p and "manifest counts 5 present" in p for p in report.problems)
