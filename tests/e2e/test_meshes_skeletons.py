"""Sharded meshes and skeletons: thousands of segment ids (up to 2**64 - 1) converted from the
unsharded layout, read back by CloudVolume (meshes, skeletons) and TensorStore's
`neuroglancer_uint64_sharded` kvstore (every key), with resume, verify, legacy meshes and the
bad inputs refused with the segment id."""

from __future__ import annotations

import json
import pathlib
import shutil
import struct
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from cloudvolume import CloudVolume

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import PlanError
from shardwright.formats.precomputed import meshes, skeletons
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import ShardBuilder, ShardingSpec
from shardwright.planning.objects import ObjectPlan
from tests.support.segment_objects import (
    segment_ids,
    write_legacy_meshes,
    write_multilod_meshes,
    write_segmentation,
    write_skeletons,
)

SEGMENTS = 3000
SAMPLE = [2**64 - 1, 2**64 - 2, 2**63, 1, 2]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, np.ndarray]:
    """A segmentation whose info names `mesh` and `skeletons`, each with SEGMENTS ids."""
    root = tmp_path_factory.mktemp("objects") / "seg"
    ids = segment_ids(SEGMENTS)
    write_segmentation(root, "mesh", "skeletons")
    write_multilod_meshes(root / "mesh", ids)
    write_skeletons(root / "skeletons", ids)
    return root, ids


def _kvstore(directory: pathlib.Path) -> Any:
    info = json.loads((directory / "info").read_text())
    return ts.KvStore.open(
        {
            "driver": "neuroglancer_uint64_sharded",
            "base": f"file://{directory}/",
            "metadata": info["sharding"],
        }
    ).result()


def _key(segment: int) -> bytes:
    return struct.pack(">Q", segment)  # the kvstore's key: the id as 8 bytes, big-endian


def _mesh(volume: CloudVolume, segment: int) -> Any:
    got = volume.mesh.get(segment)
    return got[segment] if isinstance(got, dict) else got


# -- formats ---------------------------------------------------------------------------------
def test_manifest_parses_and_re_encodes_byte_for_byte(tmp_path: pathlib.Path) -> None:
    write_multilod_meshes(tmp_path, np.array([5, 2**64 - 1], np.uint64))
    for name in ("5.index", f"{2**64 - 1}.index"):
        blob = (tmp_path / name).read_bytes()
        manifest = meshes.MultiLodManifest.from_bytes(blob)
        assert manifest.to_bytes() == blob
        assert manifest.num_lods == 2
        assert manifest.data_nbytes == (tmp_path / name.removesuffix(".index")).stat().st_size
    with pytest.raises(meshes.MeshFormatError, match="truncated"):
        meshes.MultiLodManifest.from_bytes(blob[:-3])
    with pytest.raises(meshes.MeshFormatError, match="after its last level"):
        meshes.MultiLodManifest.from_bytes(blob + b"\0")


def test_builder_stores_unindexed_bytes_right_before_an_entry() -> None:
    spec = ShardingSpec(
        preshift_bits=0,
        hash="murmurhash3_x86_128",
        minishard_bits=1,
        shard_bits=0,
        minishard_index_encoding="gzip",
        data_encoding="gzip",
    )
    builder = ShardBuilder(spec, 0)
    entries = {7: (b"manifest-7", b"fragments of 7"), 2**64 - 1: (b"m", b""), 3: (b"m3", b"xyz")}
    for segment, (manifest, fragments) in entries.items():
        builder.add(segment, manifest, prefix=fragments)
    data = builder.finish().to_bytes()
    reader = ShardedReader(spec, lambda name, start, end: data[start:end])
    for segment, (manifest, fragments) in entries.items():
        assert reader.read(segment) == manifest  # data_encoding applies to the entry only
        _, start, _ = reader.locate(segment) or ("", 0, 0)
        assert data[start - len(fragments) : start] == fragments  # stored raw, right before


def test_skeleton_checks_name_the_segment() -> None:
    attributes = skeletons.vertex_attributes({"vertex_attributes": [
        {"id": "radius", "data_type": "float32", "num_components": 1}]})  # fmt: skip
    good = struct.pack("<II", 2, 1) + bytes(24) + struct.pack("<II", 0, 1) + bytes(8)
    assert skeletons.check_skeleton(9, good, attributes) == (2, 1)
    with pytest.raises(skeletons.SkeletonFormatError, match="segment 9: .* must be 48 bytes"):
        skeletons.check_skeleton(9, good[:-1], attributes)
    bad_edge = struct.pack("<II", 2, 1) + bytes(24) + struct.pack("<II", 0, 5) + bytes(8)
    with pytest.raises(skeletons.SkeletonFormatError, match="segment 9: an edge names vertex 5"):
        skeletons.check_skeleton(9, bad_edge, attributes)
    with pytest.raises(skeletons.SkeletonFormatError, match="data_type 'float64'"):
        skeletons.vertex_attributes(
            {"vertex_attributes": [{"id": "r", "data_type": "float64", "num_components": 1}]}
        )


# -- conversions -----------------------------------------------------------------------------
def test_meshes_and_skeletons_convert_and_read_back_through_cloudvolume_and_tensorstore(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    root, ids = source
    dest = tmp_path / "seg"
    assert cli_main(["convert", str(root), str(dest), "--with-meshes", "--with-skeletons",
                     "--scheduler", "processes", "--workers", "2", "--quiet"]) == 0  # fmt: skip
    info = json.loads((dest / "info").read_text())
    assert (info["mesh"], info["skeletons"]) == ("mesh", "skeletons")
    volume_manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert set(volume_manifest["companions"]) == {str(dest / "mesh"), str(dest / "skeletons")}

    for kind in ("mesh", "skeletons"):
        out_info = json.loads((dest / kind / "info").read_text())
        sharding = out_info["sharding"]
        assert (sharding["hash"], sharding["preshift_bits"]) == ("murmurhash3_x86_128", 0)
        manifest = json.loads((dest / kind / MANIFEST_KEY).read_text())
        assert manifest["totals"]["chunks"] == SEGMENTS
        stored = sorted(p.name for p in (dest / kind).glob("*.shard"))
        # Every source object read once, the lease checked before each shard and the info
        # written, and the coordinator's look for a manifest to replace.
        reads = SEGMENTS * (2 if kind == "mesh" else 1)
        assert manifest["totals"]["requests"]["gets"] == reads + len(stored) + 2
        assert stored == sorted(e["key"] for e in manifest["shards"])
        assert 1 < len(stored) < SEGMENTS // 50  # grouped, not one object per segment

        # TensorStore: every segment id is a key, and its value is the unsharded object.
        kv = _kvstore(dest / kind)
        keys = kv.list().result()
        assert sorted(struct.unpack(">Q", k)[0] for k in keys) == sorted(ids.tolist())
        for segment in ids.tolist()[::7] + SAMPLE:
            want = root / kind / (f"{segment}.index" if kind == "mesh" else str(segment))
            assert kv.read(_key(segment)).result().value == want.read_bytes(), segment

    # CloudVolume reads both layouts the same, from the ids near 2**64 to the smallest.
    original = CloudVolume(f"precomputed://file://{root}", progress=False)
    sharded = CloudVolume(f"precomputed://file://{dest}", progress=False)
    for segment in SAMPLE + ids.tolist()[:: SEGMENTS // 25]:
        a, b = _mesh(original, segment), _mesh(sharded, segment)
        assert len(a.vertices) > 0
        np.testing.assert_array_equal(a.vertices, b.vertices)
        np.testing.assert_array_equal(a.faces, b.faces)
        sa, sb = original.skeleton.get(segment), sharded.skeleton.get(segment)
        np.testing.assert_array_equal(sa.vertices, sb.vertices)
        np.testing.assert_array_equal(sa.edges, sb.edges)
        np.testing.assert_array_equal(sa.radius, sb.radius)
        np.testing.assert_array_equal(sa.vertex_types, sb.vertex_types)

    for kind in ("mesh", "skeletons"):
        report = api.verify(str(dest / kind), str(root / kind), full=True)
        assert report.ok, report.summary()
        assert report.objects_checked == SEGMENTS and report.chunks_compared == 0


def test_mesh_and_skeleton_shards_in_flight_together_are_each_written(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path, client: Any
) -> None:
    """A mesh shard and a skeleton shard share a file name; on one cluster at once (a window
    wider than the job) each must still run as its own task: a cluster handed a key it holds
    returns that task's result instead, which once left the skeletons unwritten behind a
    manifest that listed them."""
    root, ids = source
    dest = tmp_path / "seg"
    api.convert(str(root), str(dest), client=client, window=10_000, progress=False,
                with_meshes=True, with_skeletons=True)  # fmt: skip
    for kind, reads in (("mesh", 2 * SEGMENTS), ("skeletons", SEGMENTS)):
        manifest = json.loads((dest / kind / MANIFEST_KEY).read_text())
        stored = sorted(p.name for p in (dest / kind).glob("*.shard"))
        assert stored == sorted(e["key"] for e in manifest["shards"]) != []
        assert manifest["totals"]["requests"]["gets"] == reads + len(stored) + 2
        kv = _kvstore(dest / kind)
        for segment in ids.tolist()[::97]:
            want = root / kind / (f"{segment}.index" if kind == "mesh" else str(segment))
            assert kv.read(_key(segment)).result().value == want.read_bytes(), (kind, segment)


def test_plan_shows_hashed_sharding_and_groups_ids_without_objects(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path, capsys: Any
) -> None:
    root, ids = source
    assert cli_main(["plan", str(root / "mesh"), str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "murmurhash3_x86_128, preshift 0" in text and f"{SEGMENTS:,}" in text
    plan = api.plan(str(root / "mesh"), str(tmp_path / "out"), target_shard_bytes=64 * 1024)
    assert isinstance(plan, ObjectPlan)
    tasks = list(plan.shards())
    assert len(tasks) == plan.shard_count > 8
    assert sorted(np.concatenate([t.ids for t in tasks]).tolist()) == sorted(ids.tolist())
    shard_of = plan.sharding.locate(plan.ids_by_shard)[0]
    for task in tasks:
        assert (plan.sharding.locate(task.ids)[0] == task.shard_number).all()
    assert (np.diff(shard_of.astype(np.int64)) >= 0).all()  # grouped by shard
    assert not (tmp_path / "out").exists()


def test_resume_rewrites_only_missing_shards(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    root, _ = source
    dest = tmp_path / "skeletons"
    first = api.convert(str(root / "skeletons"), str(dest), scheduler="threads", progress=False)
    assert isinstance(first, api.Manifest)
    lost = sorted(dest.glob("*.shard"))[1]
    lost.unlink()
    (dest / MANIFEST_KEY).unlink()
    again = api.convert(
        str(root / "skeletons"), str(dest), scheduler="threads", progress=False, resume=True
    )
    assert isinstance(again, api.Manifest)
    assert again.dataset == "objects"
    assert again.totals.resumed_shards == first.totals.shards - 1
    assert again.totals.requests["gets"] < SEGMENTS // 4  # only the lost shard's reads
    # The kept shards are untouched; the rewritten one holds every segment exactly (its gzip
    # bytes may differ: ISA-L's output for the same input can vary when threads compress at
    # once, always decoding to the same data).
    kept = [(e.key, e.crc32c) for e in first.shards if e.key != lost.name]
    assert [(e.key, e.crc32c) for e in again.shards if e.key != lost.name] == kept
    assert {e.key for e in again.shards} == {e.key for e in first.shards}
    assert api.verify(str(dest), str(root / "skeletons"), full=True).ok


def test_legacy_meshes_are_refused_unless_re_encoded(tmp_path: pathlib.Path) -> None:
    ids = segment_ids(120, seed=5)
    originals = write_legacy_meshes(tmp_path / "seg" / "mesh", ids)
    write_segmentation(tmp_path / "seg", "mesh", None)
    with pytest.raises(PlanError, match=r"legacy single-resolution .* legacy_to_multires=True"):
        api.plan(str(tmp_path / "seg" / "mesh"), str(tmp_path / "out" / "mesh"))
    dest = tmp_path / "out"
    manifest = api.convert(
        str(tmp_path / "seg"),
        str(dest),
        with_meshes=True,
        legacy_to_multires=True,
        scheduler="threads",
        progress=False,
    )
    assert isinstance(manifest, api.Manifest)
    info = json.loads((dest / "mesh" / "info").read_text())
    assert info["@type"] == "neuroglancer_multilod_draco"
    assert info["vertex_quantization_bits"] == 16
    sharded = CloudVolume(f"precomputed://file://{dest}", progress=False)
    for segment in [2**64 - 1, *ids.tolist()[::10]]:
        vertices, faces = originals[segment]
        mesh = _mesh(sharded, segment)
        tolerance = float((vertices.max(0) - vertices.min(0)).max()) / (2**16 - 1)
        np.testing.assert_allclose(mesh.vertices, vertices, atol=tolerance)
        np.testing.assert_array_equal(mesh.faces, faces)
    assert api.verify(str(dest / "mesh"), str(tmp_path / "seg" / "mesh"), full=True).ok


# -- bad input -------------------------------------------------------------------------------
def _copy(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path, kind: str
) -> pathlib.Path:
    root, _ = source
    copy = tmp_path / kind
    shutil.copytree(root / kind, copy)
    return copy


def test_an_unknown_type_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "info").write_text(json.dumps({"@type": "neuroglancer_annotations_v1"}))
    with pytest.raises(PlanError, match="@type 'neuroglancer_annotations_v1'"):
        api.plan(str(tmp_path / "odd"), str(tmp_path / "out"))


def test_a_missing_manifest_is_named_before_anything_is_written(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    mesh = _copy(source, tmp_path, "mesh")
    (mesh / f"{2**64 - 2}.index").unlink()
    with pytest.raises(PlanError, match=f"segment {2**64 - 2}: .* manifest {2**64 - 2}.index is"):
        api.convert(str(mesh), str(tmp_path / "out"), scheduler="sync", progress=False)
    assert not (tmp_path / "out").exists()


def test_inconsistent_fragment_sizes_are_named_and_leave_no_shard(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    mesh = _copy(source, tmp_path, "mesh")
    with open(mesh / "3", "ab") as data:
        data.write(b"extra")
    plan = api.plan(str(mesh), str(tmp_path / "out"))
    assert isinstance(plan, ObjectPlan)
    bad_shard = next(t.key for t in plan.shards() if 3 in t.ids.tolist())
    with pytest.raises(meshes.MeshFormatError, match="segment 3: .* holds [0-9]+ bytes"):
        api.convert(plan, scheduler="sync", progress=False)
    assert not (tmp_path / "out" / bad_shard).exists()
    assert not (tmp_path / "out" / MANIFEST_KEY).exists()


def test_a_malformed_skeleton_is_named(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    copy = _copy(source, tmp_path, "skeletons")
    segment = 2**64 - 1
    (copy / str(segment)).write_bytes((copy / str(segment)).read_bytes()[:-2])
    with pytest.raises(skeletons.SkeletonFormatError, match=f"segment {segment}: skeleton"):
        api.convert(str(copy), str(tmp_path / "out"), scheduler="sync", progress=False)


def test_objects_refuse_volume_only_options(
    source: tuple[pathlib.Path, np.ndarray], tmp_path: pathlib.Path
) -> None:
    root, _ = source
    with pytest.raises(PlanError, match="precomputed only"):
        api.plan(str(root / "mesh"), str(tmp_path / "out"), format="zarr3")
    with pytest.raises(PlanError, match="names no skeletons directory"):
        write_segmentation(tmp_path / "bare", None, None)
        api.plan(str(tmp_path / "bare"), str(tmp_path / "out"), with_skeletons=True)
