"""What verify asks of a Neuroglancer precomputed dataset, from its `info`: whether any
scale is sharded, the shards its geometry names with how to check and read them, its
scales' keys, where it places the volume and, unsharded, the chunks its finest scale is
read in."""

from __future__ import annotations

from typing import Any

from shardwright.errors import ShardFormatError
from shardwright.formats.precomputed.info import PrecomputedInfo
from shardwright.planning.formats import FormatReader
from shardwright.sources import Source
from shardwright.stores import Store
from shardwright.verification.compare import ChunkComparer, PrecomputedComparer
from shardwright.verification.integrity import check_precomputed_shard
from shardwright.verification.placement import Expected, compare_placed
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import Dataset


def holds_shards(documents: dict[str, Any]) -> bool:
    """Whether any scale of the `info` is sharded (a malformed one counts as sharded, for
    `dataset` to name what is wrong with it)."""
    scales = documents["info"].get("scales") if isinstance(documents["info"], dict) else None
    if not isinstance(scales, list):
        return True
    return any(not isinstance(s, dict) or s.get("sharding") is not None for s in scales)


def dataset(store: Store, documents: dict[str, Any]) -> Dataset:
    """The sharded scales' shards: those the geometry names, those stored, their checks."""
    info = PrecomputedInfo.from_json(documents["info"])
    scales = {s.key: s for s in info.scales}
    expected: set[str] = set()
    listed: set[str] = set()
    for scale in info.scales:
        if scale.sharding is None:
            continue
        expected.update(
            f"{scale.key}/{scale.sharding.shard_filename(n)}" for n in scale.shard_numbers()
        )
        listed.update(f"{scale.key}/{name}" for name in store.list_sizes(scale.key))

    def check(key: str) -> Any:
        spec = scales[key.rsplit("/", 1)[0]].sharding  # the scale key prefixes the shard
        if spec is None:
            raise ShardFormatError(f"{key}: its scale is not sharded")
        return check_precomputed_shard(store, key, spec)

    comparers: list[ChunkComparer] = [
        PrecomputedComparer(store, info, s.key) for s in info.scales if s.sharding
    ]
    return Dataset(expected, listed, check, comparers, may_skip_empty=False)


def levels(info: dict[str, Any]) -> list[str]:
    """The scales' keys, finest first."""
    return [str(s.get("key")) for s in info.get("scales", []) if isinstance(s, dict)]


def check_placement(
    report: VerifyReport, documents: dict[str, Any], expected: Expected, source: Source
) -> None:
    """The finest scale's resolution and voxel offset against where the output should sit."""
    scale = PrecomputedInfo.from_json(documents["info"]).scales[0]
    compare_placed(report, "voxel size (nm)", scale.resolution, expected.resolution, expected,
                   "resolution")  # fmt: skip
    compare_placed(report, "voxel offset", scale.voxel_offset, expected.voxel_offset, expected,
                   "voxel_offset")  # fmt: skip


def chunk_reading(documents: dict[str, Any]) -> tuple[list[int] | None, bool]:
    """The finest scale's chunk size, and whether its chunks are jpeg (lossy)."""
    finest = (documents["info"].get("scales") or [{}])[0]
    return (finest.get("chunk_sizes") or [None])[0], finest.get("encoding") == "jpeg"


READER = FormatReader("info", holds_shards, dataset, lambda document: [], levels,
                      check_placement=check_placement, chunk_reading=chunk_reading)  # fmt: skip
