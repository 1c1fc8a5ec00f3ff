"""Planning a directory of meshes or skeletons: segment ids from object names, what a listing
must hold, the hashed sharding's sizes, ids grouped by the shard CloudVolume's own sharding
arithmetic puts them in, what is detected as such a directory, and the refusals."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np
import pytest
from cloudvolume.datasource.precomputed.sharding import ShardingSpecification
from hypothesis import given
from hypothesis import strategies as st

from shardwright.errors import PlanError, ShardwrightError
from shardwright.options import ConvertOptions
from shardwright.planning import objects
from shardwright.planning.objects import (
    LEGACY,
    MULTILOD,
    OBJECTS_PER_MINISHARD,
    SKELETONS,
    choose_sharding,
    make_object_plan,
    object_source_info,
    segment_id_of,
)

MESH_INFO = {
    "@type": "neuroglancer_multilod_draco",
    "vertex_quantization_bits": 16,
    "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
    "lod_scale_multiplier": 1.0,
}
SKELETON_INFO = {"@type": "neuroglancer_skeletons", "vertex_attributes": []}


@pytest.mark.parametrize(
    ("name", "segment"),
    [("0", 0), ("12", 12), (str(2**64 - 1), 2**64 - 1), (str(2**64), None), ("012", None),
     ("12:0", None), ("12.index", None), ("info", None), ("", None), ("-1", None), ("1e3", None)],
)  # fmt: skip
def test_a_segment_id_is_a_plain_base_10_name_within_uint64(name: str, segment: int | None) -> None:
    assert segment_id_of(name) == segment


def test_a_multilod_listing_pairs_each_manifest_with_its_data() -> None:
    listing = {"info": 100, "7": 30, "7.index": 5, "3": 40, "3.index": 6, "junk": 1}
    ids, count, total = objects._segments(MULTILOD, listing, "/m")
    assert ids.tolist() == [3, 7] and ids.dtype == np.uint64
    assert (count, total) == (4, 30 + 5 + 40 + 6)
    orphan = r"segment 3: /m/3 holds fragment data but its manifest 3\.index is missing"
    with pytest.raises(PlanError, match=orphan + r" \(1 more segments too\)"):
        objects._segments(MULTILOD, {"3": 1, "9": 1, "9.index": 1, "11": 2}, "/m")


def test_skeleton_and_legacy_listings_count_their_objects() -> None:
    ids, count, total = objects._segments(SKELETONS, {"info": 9, "5": 10, "2": 20, "x": 3}, "/s")
    assert (ids.tolist(), count, total) == ([2, 5], 2, 30)
    legacy = {"info": 9, "5:0": 10, "5:0:1.frag": 100, "8:0": 20, "8:0:1.frag": 200, "8:1": 4}
    ids, count, total = objects._segments(LEGACY, legacy, "/l")
    assert ids.tolist() == [5, 8] and count == 5 and total == 334
    with pytest.raises(PlanError, match="/e has an info but no segment objects"):
        objects._segments(SKELETONS, {"info": 9}, "/e")


@given(
    count=st.integers(1, 10**8),
    per_object=st.integers(1, 10**6),
    target=st.integers(2**20, 2**32),
    min_shards=st.integers(1, 256),
)
def test_hashed_object_sharding_keeps_shards_and_minishards_small(
    count: int, per_object: int, target: int, min_shards: int
) -> None:
    options = ConvertOptions(target_shard_bytes=target, min_shards=min_shards)
    spec = choose_sharding(options, MULTILOD, count, count * per_object)
    assert spec.hash == "murmurhash3_x86_128" and spec.preshift_bits == 0
    assert spec.minishard_bits <= objects.MAX_MINISHARD_BITS
    assert count * per_object / 2**spec.shard_bits <= target  # shards of the target size
    assert count / 2 ** (spec.shard_bits + spec.minishard_bits) <= OBJECTS_PER_MINISHARD
    enough = 2 ** int(math.log2(max(count / objects.MIN_OBJECTS_PER_SHARD, 1)))
    assert 2**spec.shard_bits >= min(2 ** math.ceil(math.log2(min_shards)), enough)


def test_object_sharding_by_hand_and_its_options() -> None:
    # 1,000 segments of 1 KB: one shard would do; sixteen asked for, 1000 / 64 allow eight.
    spec = choose_sharding(ConvertOptions(), MULTILOD, 1000, 1000 * 1000)
    assert (spec.shard_bits, spec.minishard_bits, spec.data_encoding) == (3, 0, "raw")
    assert choose_sharding(ConvertOptions(), SKELETONS, 1000, 10**6).data_encoding == "gzip"
    given = ConvertOptions(shard_bits=1, minishard_bits=4, compression="none", preshift_bits=2)
    spec = choose_sharding(given, SKELETONS, 1000, 10**6)
    assert (spec.shard_bits, spec.minishard_bits, spec.preshift_bits) == (1, 4, 2)
    assert spec.data_encoding == "raw"
    with pytest.raises(PlanError, match="store data raw or gzip, not zstd"):
        choose_sharding(ConvertOptions(compression="zstd"), MULTILOD, 10, 10)


def _directory(tmp_path: pathlib.Path, info: dict[str, Any], names: list[str]) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "info").write_text(json.dumps(info))
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 10)
    return str(tmp_path)


def test_segments_are_grouped_by_the_shard_cloudvolume_hashes_them_to(
    tmp_path: pathlib.Path,
) -> None:
    ids = sorted({int(i) for i in np.random.default_rng(5).integers(1, 2**63, 700)} | {1, 2})
    source = _directory(tmp_path / "m", MESH_INFO, [n for i in ids for n in (str(i), f"{i}.index")])
    plan = make_object_plan(source, "/out", ConvertOptions(), MESH_INFO)
    assert plan.object_count == len(ids) and plan.source_objects == 2 * len(ids)
    assert plan.source_bytes == 10 * 2 * len(ids) and plan.kind == MULTILOD
    assert plan.info["sharding"] == plan.sharding.to_json() and "sharding" not in MESH_INFO
    reader = ShardingSpecification.from_dict(plan.sharding.to_json())
    want: dict[str, list[int]] = {}
    for segment in ids:
        shard = reader.compute_shard_location(segment).shard_number
        want.setdefault(f"{shard}.shard", []).append(segment)
    tasks = list(plan.shards())
    assert [t.shard_number for t in tasks] == sorted(t.shard_number for t in tasks)
    assert {t.key: t.ids.tolist() for t in tasks} == want  # each shard's ids, sorted
    assert plan.shard_count == len(tasks) == len(want)
    assert sum(t.chunk_count for t in tasks) == len(ids)
    assert plan.source_keys(7) == ["7", "7.index"]
    emptied = plan.for_shard_tasks()
    assert emptied.ids_by_shard.size == 0 and emptied.sharding == plan.sharding
    per = plan.describe()["segments_per_shard"]
    assert per["min"] == min(map(len, want.values())) and per["max"] == max(map(len, want.values()))


def test_skeleton_and_legacy_directories_plan_their_own_objects(tmp_path: pathlib.Path) -> None:
    skeletons = _directory(tmp_path / "s", SKELETON_INFO, ["4", "9"])
    plan = make_object_plan(skeletons, "/out", ConvertOptions(), SKELETON_INFO)
    assert plan.kind == SKELETONS and plan.source_keys(4) == ["4"] and plan.attributes == []
    legacy_info = {"@type": "neuroglancer_legacy_mesh"}
    legacy = _directory(tmp_path / "l", legacy_info, ["4:0", "4:0:a.frag"])
    with pytest.raises(PlanError, match="pass legacy_to_multires=True"):
        make_object_plan(legacy, "/out", ConvertOptions(), legacy_info)
    plan = make_object_plan(legacy, "/out", ConvertOptions(legacy_to_multires=True), legacy_info)
    assert plan.kind == LEGACY and plan.source_keys(4) == ["4:0"]
    assert plan.info["@type"] == "neuroglancer_multilod_draco"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"format": "zarr3"}, "their sharded form is precomputed only"),
        ({"mips": 2}, "mips applies to volumes"),
        ({"engine": "gpu"}, "they run on the CPU"),
    ],
)
def test_volume_options_are_refused_for_objects(
    tmp_path: pathlib.Path, values: dict[str, Any], message: str
) -> None:
    source = _directory(tmp_path, SKELETON_INFO, ["1"])
    with pytest.raises(PlanError, match=message):
        make_object_plan(source, "/out", ConvertOptions(**values), SKELETON_INFO)


def test_a_directory_already_sharded_or_with_a_bad_info_is_refused(tmp_path: pathlib.Path) -> None:
    sharded = SKELETON_INFO | {"sharding": {"@type": "neuroglancer_uint64_sharded_v1"}}
    with pytest.raises(PlanError, match="is already sharded"):
        make_object_plan(
            _directory(tmp_path / "a", sharded, ["1"]), "/o", ConvertOptions(), sharded
        )
    bad = MESH_INFO | {"vertex_quantization_bits": 12}
    with pytest.raises(ShardwrightError, match="/info: mesh info: vertex_quantization_bits must"):
        make_object_plan(_directory(tmp_path / "b", bad, ["1", "1.index"]), "/o",
                         ConvertOptions(), bad)  # fmt: skip


def test_what_counts_as_a_mesh_or_skeleton_directory(tmp_path: pathlib.Path) -> None:
    assert object_source_info(_directory(tmp_path / "m", MESH_INFO, []), {}) == MESH_INFO
    volume = {"@type": "neuroglancer_multiscale_volume", "scales": []}
    assert object_source_info(_directory(tmp_path / "v", volume, []), {}) is None
    assert object_source_info(_directory(tmp_path / "n", {"scales": []}, []), {}) is None
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "info").write_text("not json")
    assert object_source_info(str(tmp_path / "j"), {}) is None
    assert object_source_info(str(tmp_path / "nothing-here"), {}) is None
    assert object_source_info(str(tmp_path / "m" / "x.npy"), {}) is None
    assert object_source_info('{"driver": "zarr3"}', {}) is None
    assert object_source_info(np.zeros(3), {}) is None
    odd = _directory(tmp_path / "o", {"@type": "neuroglancer_annotations_v1"}, [])
    with pytest.raises(PlanError, match="has @type 'neuroglancer_annotations_v1'; shardwright "
                                        "converts neuroglancer_multiscale_volume"):  # fmt: skip
        object_source_info(odd, {})
