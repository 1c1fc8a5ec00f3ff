"""The shards a dataset's geometry calls for, against the manifest and a listing of the store,
and every recorded shard's structure, size and crc32c."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardwright.errors import ShardFormatError, ZarrMetadataError
from shardwright.formats.precomputed.info import PrecomputedInfo
from shardwright.formats.zarr3 import metadata as zarr3_metadata
from shardwright.formats.zarr3 import ome_zarr
from shardwright.lifecycle.journal import stream_crc32c
from shardwright.lifecycle.manifest import Manifest
from shardwright.stores import Store
from shardwright.verification.compare import ChunkComparer, PrecomputedComparer, ZarrComparer
from shardwright.verification.integrity import check_precomputed_shard, check_zarr3_shard
from shardwright.verification.report import VerifyReport


# -- the dataset's geometry ---------------------------------------------------------------
@dataclass
class Dataset:
    """What the metadata says: the shards its geometry calls for and how to read them."""

    expected: set[str]  # every shard key of the geometry (zarr3: empty ones included)
    listed: set[str]  # what the store holds where shards live
    check_shard: Callable[[str], Any]
    comparers: list[ChunkComparer]  # one per level, the base first
    may_skip_empty: bool  # zarr3 stores no all-fill shard


def dataset_of(
    report: VerifyReport, store: Store, documents: dict[str, Any] | None
) -> Dataset | None:
    """The dataset its metadata documents describe (`info`: precomputed; `zarr.json`: zarr3,
    an OME-Zarr group's level arrays included); None, with the problem, where they do not."""
    if documents is None:
        return None
    try:
        if "info" in documents:
            return _precomputed_dataset(store, documents["info"])
        return _zarr_dataset(store, documents)
    except (KeyError, TypeError, ValueError) as exc:
        report.problems.append(f"the metadata does not describe a dataset: {exc}")
        return None


def _precomputed_dataset(store: Store, info_json: Any) -> Dataset:
    info = PrecomputedInfo.from_json(info_json)
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


def _zarr_dataset(store: Store, documents: dict[str, Any]) -> Dataset:
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


def holds_shards(documents: dict[str, Any]) -> bool:
    """Whether the metadata documents (`info`; `zarr.json` and an OME-Zarr group's level
    arrays') store any level in shards; malformed ones count as sharded, for `dataset_of`
    to name what is wrong with them."""
    if ".zattrs" in documents:
        return False  # a Zarr v2 group: its arrays have no shards
    if "info" in documents:
        scales = documents["info"].get("scales") if isinstance(documents["info"], dict) else None
        if not isinstance(scales, list):
            return True
        return any(not isinstance(s, dict) or s.get("sharding") is not None for s in scales)
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


def check_inventory(
    report: VerifyReport, store: Store, manifest: Manifest, dataset: Dataset
) -> None:
    """The geometry's shards against the manifest's and the store's."""
    recorded = [s.key for s in manifest.shards]
    recorded_set = set(recorded)
    if len(recorded_set) != len(recorded):
        report.problems.append("the manifest lists some shards more than once")
    if manifest.totals.shards != len(recorded):
        report.problems.append(
            f"the manifest's totals say {manifest.totals.shards} shards, it lists {len(recorded)}"
        )
    for key in sorted(recorded_set - dataset.expected):
        report.problems.append(f"{key}: in the manifest, but no shard of this dataset's geometry")
    for key in sorted(dataset.listed - recorded_set):
        what = "a shard" if key in dataset.expected else "an object that is no shard"
        report.problems.append(f"{key}: stored, but not in the manifest ({what} of the dataset)")
    unrecorded = dataset.expected - recorded_set
    if not dataset.may_skip_empty:
        for key in sorted(unrecorded - dataset.listed):
            report.problems.append(f"{key}: missing (the geometry calls for it)")
        return
    empty = manifest.totals.empty_shards_skipped
    if len(unrecorded) != empty:
        report.problems.append(
            f"the manifest accounts for {len(recorded_set & dataset.expected)} of the "
            f"{len(dataset.expected)} shards of the geometry and says {empty} were empty; "
            f"{len(unrecorded) - empty} are unaccounted for"
        )


def check_shards(
    report: VerifyReport,
    store: Store,
    manifest: Manifest,
    check: Callable[[str], Any] | None,
) -> None:
    """Every shard the manifest lists: structure (when `check` is given), size and crc32c.
    Whatever fails reading one shard is that shard's problem; the others are checked."""
    for entry in manifest.shards:
        key = entry.key
        report.shards_checked += 1
        try:
            if check is not None:
                summary = check(key)
                size, chunks = summary.size, summary.chunks
            else:
                size, chunks = store.size(key), None
                if size is None:
                    raise FileNotFoundError(key)
        except FileNotFoundError:
            report.problems.append(f"{key}: missing")
            continue
        except Exception as exc:  # noqa: BLE001 - a corrupt shard must not end the run
            report.problems.append(unreadable_index(key, exc))
            continue
        if size != entry.size:
            report.problems.append(f"{key}: size {size}, the manifest says {entry.size}")
            continue
        if chunks is not None and chunks != entry.chunks:
            report.problems.append(f"{key}: {chunks} chunks, the manifest says {entry.chunks}")
        crc = stream_crc32c(store, key, size)
        if crc != entry.crc32c:
            report.problems.append(f"{key}: crc32c {crc:08x}, the manifest says {entry.crc32c:08x}")


def unreadable_index(key: str, exc: Exception) -> str:
    """The problem of a shard whose index could not be read, its cause named once."""
    cause = str(exc).removeprefix(f"{key}: ")
    return f"{key}: unreadable index ({type(exc).__name__}: {cause})"
