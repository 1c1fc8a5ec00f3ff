"""The shards a dataset's geometry calls for, against the manifest and a listing of the store,
and every recorded shard's structure, size and crc32c. Which shards a format's geometry calls
for and how to check them is its driver's (`formats/<name>/verifying.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardwright.lifecycle.journal import stream_crc32c
from shardwright.lifecycle.manifest import Manifest
from shardwright.planning.formats import reader_of
from shardwright.stores import Store
from shardwright.verification.compare import ChunkComparer
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
    """The dataset its metadata documents describe, read by the format whose metadata they
    are (its driver's `FormatReader`); None, with the problem, where they do not."""
    if documents is None:
        return None
    found = reader_of(documents)
    try:
        if found is None or found[1].dataset is None:
            raise ValueError(f"no sharded format's metadata among {sorted(documents)}")
        return found[1].dataset(store, documents)
    except (KeyError, TypeError, ValueError) as exc:
        report.problems.append(f"the metadata does not describe a dataset: {exc}")
        return None


def holds_shards(documents: dict[str, Any]) -> bool:
    """Whether the metadata documents store any level in shards, as their format reads them;
    documents of no format count as sharded, for `dataset_of` to name what is wrong."""
    found = reader_of(documents)
    return True if found is None else found[1].holds_shards(documents)


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
