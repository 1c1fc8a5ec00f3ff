"""What verify asks of a Zarr v3 dataset (an array, or an OME-Zarr 0.5 group of level
arrays), from its `zarr.json` documents: whether any array is sharded, the level arrays a
group names, the shards their geometry names with how to check and read them, and where a
group places the volume."""

from __future__ import annotations

import itertools
import math
from typing import Any

from shardwright.errors import ZarrMetadataError
from shardwright.formats.zarr3 import metadata as zarr3_metadata
from shardwright.formats.zarr3 import ome_zarr
from shardwright.planning.formats import FormatReader
from shardwright.planning.geometry import output_axes
from shardwright.sources import Source
from shardwright.sources.ome import multiscale
from shardwright.stores import Store
from shardwright.verification.compare import ChunkComparer, ZarrComparer
from shardwright.verification.integrity import check_zarr3_shard
from shardwright.verification.placement import Expected, compare_placed
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import Dataset


def linked(document: Any) -> list[str]:
    """The documents a `zarr.json` names: an OME-Zarr group's level arrays'."""
    return [f"{path}/zarr.json" for path in ome_zarr.dataset_paths(document) or []]


def holds_shards(documents: dict[str, Any]) -> bool:
    """Whether the array, or any level array of the group, is sharded (malformed documents
    count as sharded, for `dataset` to name what is wrong with them)."""
    root = documents.get("zarr.json")
    if not isinstance(root, dict):
        return True
    if root.get("node_type") == "array":
        return _sharded(root)
    paths = ome_zarr.dataset_paths(root)
    return paths is None or any(_sharded(documents.get(f"{p}/zarr.json")) for p in paths)


def _sharded(array: Any) -> bool:
    """Whether an array's zarr.json stores it in shards (`sharding_indexed`)."""
    codecs = array.get("codecs") if isinstance(array, dict) else None
    return any(isinstance(c, dict) and c.get("name") == "sharding_indexed" for c in codecs or [])


def dataset(store: Store, documents: dict[str, Any]) -> Dataset:
    """The sharded arrays' shards (every shard of the geometry, empty ones included, which
    zarr does not store), those stored, their checks."""
    root = documents["zarr.json"]
    paths = ome_zarr.dataset_paths(root)
    if paths is None:
        metas = {"": zarr3_metadata.ZarrArrayMetadata.from_json(root)}
    else:  # as a precomputed volume's unsharded scales, a group's unsharded arrays are
        # left out (another tool's levels beside those shardwright added): shards only
        sharded = [p for p in paths if _sharded(documents[f"{p}/zarr.json"])] or paths
        metas = {
            f"{path}/": zarr3_metadata.ZarrArrayMetadata.from_json(documents[f"{path}/zarr.json"])
            for path in sharded
        }
    expected: set[str] = set()
    listed: set[str] = set()
    for prefix, meta in metas.items():
        grid = [math.ceil(n / s) for n, s in zip(meta.shape, meta.shard_shape, strict=True)]
        expected.update(
            prefix + meta.chunk_key(index) for index in itertools.product(*map(range, grid))
        )
        listed.update(store.list_keys(prefix + "c"))

    def check(key: str) -> Any:
        prefix = max((p for p in metas if key.startswith(p)), key=len)
        return check_zarr3_shard(store, key, metas[prefix])

    names = next(iter(metas.values())).dimension_names
    if not names or not all(isinstance(n, str) for n in names):
        raise ZarrMetadataError("zarr.json records no dimension_names: its axes are unknown")
    axes = "".join(str(n) for n in names)
    comparers: list[ChunkComparer] = [
        ZarrComparer(store, meta, axes, prefix) for prefix, meta in metas.items()
    ]
    return Dataset(expected, listed, check, comparers, may_skip_empty=True)


def levels(root: dict[str, Any]) -> list[str]:
    """An OME-Zarr group's level arrays' paths, finest first (a bare array: none)."""
    return ome_zarr.dataset_paths(root) or []


def check_placement(
    report: VerifyReport, documents: dict[str, Any], expected: Expected, source: Source
) -> None:
    """An OME-Zarr group's axes, unit and level 0's transforms (voxel size and translation,
    nm) against where the output should sit; a bare array records none (a note)."""
    group = documents.get("zarr.json") or {}
    if group.get("node_type") != "group":
        report.notes.append("a bare zarr3 array (--zarr-layout array) records no placement")
        return
    chosen = multiscale(report.dest, group.get("attributes") or {}, None)
    want_axes = output_axes(source.axes, source.num_channels)
    if chosen.axes != want_axes:
        report.problems.append(
            f"placement: the output's axes are {chosen.axes}, the source read as "
            f"{source.axes} gives {want_axes}"
        )
        return
    units = {chosen.units[chosen.axes.index(a)] for a in "xyz"}
    if units != {expected.unit}:
        report.problems.append(
            f"placement: the output's unit is {'/'.join(map(str, units))}, expected {expected.unit}"
        )
    physical = chosen.physical(chosen.axes)
    if physical is None:
        report.problems.append("placement: the output's OME-Zarr transforms give no placement")
        return
    voxel_size, translation = physical
    corner = [(o + s) * r for o, s, r in zip(expected.voxel_offset, expected.subvoxel_offset,
                                             expected.resolution, strict=True)]  # fmt: skip
    compare_placed(report, "voxel size (nm)", voxel_size, expected.resolution, expected,
                   "resolution")  # fmt: skip
    compare_placed(report, "translation (nm)", translation, corner, expected, "voxel_offset")


def places_volume(documents: dict[str, Any]) -> bool:
    """Whether the documents place the volume: an OME-Zarr group's do, a bare array's not."""
    root = documents.get("zarr.json")
    return not (isinstance(root, dict) and root.get("node_type") == "array")


READER = FormatReader(
    "zarr.json", holds_shards, dataset, linked, levels, check_placement=check_placement,
    level_documents=lambda keys: [f"{key}/zarr.json" for key in keys],
    places_volume=places_volume,
)  # fmt: skip
