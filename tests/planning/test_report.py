"""The plan report `shardwright plan` prints, line by line, from a described plan written out
by hand (box and hashed shards, precomputed and zarr3, a pyramid, absent chunks, placement)."""

from __future__ import annotations

from typing import Any

from shardwright.planning.report import volume_report


def _described(**changes: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "source": "/data/v.npy",
        "destination": "/out",
        "format": "precomputed",
        "size_xyz": [100, 200, 30],
        "data_type": "uint8",
        "channels": 1,
        "layer_type": "image",
        "chunk_size_xyz": [64, 64, 16],
        "grid_xyz": [2, 4, 2],
        "chunks": 16,
        "encoded_ratio_sampled": 0.25,
        "resolution_xyz": [4, 4, 40],
        "voxel_offset_xyz": [10, 0, 3],
        "placement": {"resolution_from": "option", "voxel_offset_from": "option",
                      "unit": "nanometer", "subvoxel_offset_xyz": [0, 0, 0]},
        "source_chunks_absent_sampled": [0, 6],
        "shard_shape_chunks_xyz": [2, 2, 2],
        "shards": 2,
        "chunks_per_shard": 8,
        "estimated_bytes_per_shard": 3 * 1024**2,
        "epoch_shape_chunks_xyz": [2, 2, 1],
        "memory_budget_per_task": 1024**3,
        "estimated_peak_bytes_per_task": 10 * 1024**2,
        "sharding": {"hash": "identity", "preshift_bits": 2, "minishard_bits": 1,
                     "shard_bits": 1, "data_encoding": "gzip",
                     "minishard_index_encoding": "gzip"},
        "shard_index_bytes": 32,
        "minishard_index_bytes": 96,
        "scale_key": "4_4_40",
        "encoding": "raw",
    }  # fmt: skip
    return d | changes


def test_a_box_sharded_precomputed_plan_reads_line_by_line() -> None:
    lines = volume_report(_described(), epoch_bytes=256 * 1024).splitlines()
    assert lines == [
        "source       /data/v.npy",
        "destination  /out  (precomputed)",
        "volume       100 x 200 x 30 voxels, uint8 x 1 channel(s), image",
        "chunks       64 x 64 x 16 voxels; grid 2 x 4 x 2 = 16 chunks; sampled encoded/raw "
        "ratio 0.25",
        "placement    voxel 4 x 4 x 40 nm, offset 10 x 0 x 3 voxels (40 x 0 x 120 nm): both "
        "as given",
        "shards       2 shards of 2 x 2 x 2 chunks (8 chunks)",
        "bytes/shard  ~3.0 MiB encoded",
        "sharding     identity, preshift 2, minishard 1 (2 per shard), shard 1; data gzip, "
        "index gzip",
        "indexes      shard index 32 B, minishard index <= 96 B",
        "scale        4_4_40, encoding raw",
        "memory       epoch 2 x 2 x 1 chunks (256.0 KiB); peak per task ~10.0 MiB of 1.0 GiB "
        "budget",
    ]


def test_hashed_shards_absent_chunks_and_companions_get_their_lines() -> None:
    d = _described(shard_shape_chunks_xyz=None, shards=1000, chunks_per_shard=1234,
                   source_chunks_absent_sampled=[3, 6], minishard_index_bytes=None)  # fmt: skip
    text = volume_report(d, 1, companions=["MESHES", "SKELETONS"], fill="255")
    assert (
        "shards       1,000 hashed shards (chunks scattered in space), ~1,234 chunks each" in text
    )
    assert (
        "absent       50 % of sampled source chunks (3 of 6) are not stored: written as the "
        "source's fill value (255)"
    ) in text
    assert "indexes      shard index 32 B\n" in text  # no minishard bound for hashed shards
    assert text.endswith("budget\n\nMESHES\n\nSKELETONS")


def test_a_zarr3_pyramid_names_its_array_and_each_level() -> None:
    d = _described(format="zarr3", zarr_axes="czyx", zarr_shape=[2, 30, 200, 100],
                   zarr_shard_shape=[2, 32, 128, 128], zarr_chunk_shape=[2, 16, 64, 64],
                   shard_index_bytes=132,
                   pyramid={"levels": 2, "factors_xyz": [[2, 2, 1]], "method": "average",
                            "factor_from": "for the voxel size 4 x 4 x 40 nm"},
                   levels=[{"level": 1, "key": "1", "size_xyz": [50, 100, 30],
                            "resolution_xyz": [8, 8, 40],
                            "chunk_size_xyz": [50, 64, 16], "shards": 1,
                            "shard_shape_chunks_xyz": [1, 2, 2],
                            "estimated_bytes_per_shard": 2048,
                            "estimated_peak_bytes_per_task": 4096}])  # fmt: skip
    del d["sharding"]
    lines = volume_report(d, 1).splitlines()
    assert (
        "zarr         axes czyx, shape [2, 30, 200, 100], shard [2, 32, 128, 128], chunk "
        "[2, 16, 64, 64]; shard index 132 B"
    ) in lines
    assert not any(line.startswith(("sharding", "scale")) for line in lines)
    assert (
        "pyramid      2 levels, factors for the voxel size 4 x 4 x 40 nm, downsample "
        "average; source read once, levels chained"
    ) in lines
    assert (
        "level 1      1: 50 x 100 x 30 voxels of 8 x 8 x 40 nm (level 0 by 2 x 2 x 1), chunk "
        "50 x 64 x 16, 1 shard of "
        "1 x 2 x 2 "
        "chunks, ~2.0 KiB/shard, peak per task ~4.0 KiB"
    ) in lines


def test_placement_says_where_each_value_came_from_and_the_unit_written() -> None:
    placed = {"resolution_from": "OME-Zarr 0.4 dataset '0'", "voxel_offset_from": "default",
              "unit": "micrometer", "subvoxel_offset_xyz": [0, 0, 0]}  # fmt: skip
    d = _described(placement=placed, resolution_xyz=[0.5, 4, 40], voxel_offset_xyz=[3, 0, 0])
    line = next(x for x in volume_report(d, 1).splitlines() if x.startswith("placement"))
    assert line == (
        "placement    voxel 0.5 x 4 x 40 nm (from OME-Zarr 0.4 dataset '0'), offset 3 x 0 x 0 "
        "voxels (1.5 x 0 x 0 nm) (none recorded in the source)"
    )  # precomputed output is written in nm: no unit said
    zarr = _described(placement=placed, format="zarr3", zarr_axes="zyx", zarr_shape=[1],
                      zarr_shard_shape=[1], zarr_chunk_shape=[1])  # fmt: skip
    report = volume_report(zarr, 1, unit_written="micrometer")
    line = next(x for x in report.splitlines() if x.startswith("placement"))
    assert line.endswith("; written in micrometers")
