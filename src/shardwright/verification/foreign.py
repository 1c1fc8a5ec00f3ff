"""Verify a sharded dataset shardwright did not write (TensorStore, Igneous, zarr-python...).

Without a manifest there are no checksums to hold the bytes to; what the format itself
defines is checked: the metadata parses and describes a sharded dataset; the objects stored
where shards live are the shards its geometry names (absent ones read as the fill value, as
every reader treats them); every stored shard's index parses and points inside it; chunks
decode (every one with `full`, else a seeded sample of each level); and with a source, the
base level's voxels equal the source's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shardwright.errors import ShardwrightError
from shardwright.planning.formats import FormatReader, reader_of
from shardwright.planning.geometry import DEFAULT_CHUNK
from shardwright.sources import Source, open_source
from shardwright.stores import Store
from shardwright.verification.compare import (
    SourceComparer,
    compare_chunks,
    decode_chunks,
    same_size,
)
from shardwright.verification.placement import check_foreign_placement
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import dataset_of, holds_shards, unreadable_index

NOTE = "no manifest: format-level checks only"


def verify_foreign(
    report: VerifyReport,
    store: Store,
    metadata_key: str,
    source: Source | None,
    *,
    full: bool,
    sample: int,
    against: object = None,
    scale: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Check the dataset whose metadata is `metadata_key` (`info`, `zarr.json`, `.zattrs`) as
    its format defines it; every problem goes into `report`. `source`: the one `against`
    names, read at `scale`; the dataset's placement is compared with it, sharded or not."""
    found = reader_of({metadata_key: None})
    assert found is not None, metadata_key  # state.foreign_metadata finds one of theirs
    report.format, reader = found
    report.notes.append(NOTE)
    documents = _documents(report, store, metadata_key, reader.linked)
    if documents is not None and not holds_shards(documents):
        _verify_unsharded(report, reader, documents, source, full, sample, against, scale,
                          storage_options)  # fmt: skip
        return
    dataset = dataset_of(report, store, documents)
    if dataset is None:
        return
    for key in sorted(dataset.listed - dataset.expected):
        report.problems.append(
            f"{key}: stored where the shards live, but no shard of this dataset's geometry"
        )
    absent = dataset.expected - dataset.listed
    if absent:
        report.notes.append(
            f"{len(absent)} of the {len(dataset.expected)} shards of the geometry are not "
            "stored (readers see the fill value there)"
        )
    broken: set[str] = set()
    for key in sorted(dataset.expected & dataset.listed):
        report.shards_checked += 1
        try:
            dataset.check_shard(key)
        except Exception as exc:  # noqa: BLE001 - a corrupt shard must not end the run
            report.problems.append(unreadable_index(key, exc))
            broken.add(key)
    for level, comparer in enumerate(dataset.comparers):
        decode_chunks(report, comparer, full, sample, broken, f"level {level} " if level else "")
    if source is not None and documents is not None:
        output = _as_source(report, documents, storage_options)
        if output is not None:
            _compare_placement(report, reader.places_volume(documents), output, source)
    if source is not None and same_size(report, source, dataset.comparers[0].size, against, scale):
        compare_chunks(report, source, dataset.comparers[0], full, sample)
        if len(dataset.comparers) > 1:
            report.notes.append(
                "levels above the base were decoded, not compared with the source (without a "
                "manifest, how they were reduced is not known)"
            )


UNSHARDED = "not sharded: read through shardwright's own readers, box by box"


def _verify_unsharded(
    report: VerifyReport,
    reader: FormatReader,
    documents: dict[str, Any],
    source: Source | None,
    full: bool,
    sample: int,
    against: object,
    scale: str | None,
    storage_options: dict[str, Any] | None,
) -> None:
    """A dataset no shard holds (CloudVolume's chunk files, a zarr array of plain chunks):
    its finest level read as a source, box by box; with a source, its placement and voxels
    compared with the source's."""
    report.notes.append(UNSHARDED)
    output = _as_source(report, documents, storage_options)
    if output is None:
        return
    chunk, lossy = reader.chunk_reading(documents)
    comparer = SourceComparer(output, tuple(chunk or DEFAULT_CHUNK), lossy=lossy)
    if source is None:
        decode_chunks(report, comparer, full, sample)
        return
    _compare_placement(report, reader.places_volume(documents), output, source)
    if same_size(report, source, comparer.size, against, scale):
        compare_chunks(report, source, comparer, full, sample)  # absent chunks: the fill


def _as_source(
    report: VerifyReport, documents: dict[str, Any], storage_options: dict[str, Any] | None
) -> Source | None:
    """The dataset's finest level opened as a source (its placement read as a source's), or
    None with the problem that it cannot be."""
    try:
        return open_source(report.dest, storage_options=storage_options, fill_missing=True)
    except (ShardwrightError, ValueError, OSError) as exc:
        report.problems.append(f"{report.dest}: cannot be read as a volume ({exc})")
        return None


def _compare_placement(report: VerifyReport, placed: bool, output: Source, source: Source) -> None:
    """The output's placement against the source's, where its documents record one (`placed`;
    a bare zarr array's do not: a note)."""
    if not placed:
        report.notes.append("a bare zarr array records no placement: not compared")
        return
    check_foreign_placement(report, output, source)


def _documents(
    report: VerifyReport, store: Store, key: str, linked: Callable[[Any], list[str]]
) -> dict[str, Any] | None:
    """The metadata documents: `key` (`info`, `zarr.json`, `.zattrs`) and those it names
    (`linked`: an OME-Zarr group's level arrays' `k/zarr.json`); None, with the problem,
    where one is unreadable."""
    documents: dict[str, Any] = {}
    keys = [key]
    while keys:
        name = keys.pop(0)
        try:
            documents[name] = json.loads(store.read(name))
        except FileNotFoundError:
            report.problems.append(f"{name}: missing")
            return None
        except ValueError as exc:
            report.problems.append(f"{name}: not valid JSON ({exc})")
            return None
        if name == key:
            keys += linked(documents[name])
    return documents
