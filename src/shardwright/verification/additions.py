"""What shardwright added to a dataset in place (lifecycle/addition.py), checked: ours or
another tool's dataset alike.

- The info still names what each finished addition added (directories, scales).
- Each document it wrote (segment properties) is byte for byte what it wrote (sha256).
- Each directory of meshes or skeletons is checked as `verify` checks it alone.
- Each level shard it wrote has the size and crc32c its record gives (for our own dataset
  these join the manifest's shards, so the volume's own checks cover them: `with_added`).
- Each added level equals the level below it reduced by the factor and method recorded, in
  a seeded sample of boxes (all with `full`), read back through the dataset's own reader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from typing import Any

import numpy as np

from shardwright.common.downsample import METHODS, downsample, factor_between
from shardwright.common.receipts import ShardEntry
from shardwright.errors import ShardwrightError
from shardwright.lifecycle.addition import added_levels, read_additions
from shardwright.lifecycle.journal import stream_crc32c
from shardwright.lifecycle.manifest import Manifest
from shardwright.planning import pyramid
from shardwright.planning.formats import readers
from shardwright.sources import open_source
from shardwright.stores import Store
from shardwright.verification.objects import verify_directories
from shardwright.verification.report import VerifyReport

BOX = 128  # voxels along each axis of a compared box of an added level


def with_added(manifest: Manifest, store: Store) -> Manifest:
    """Our own dataset's manifest with the level shards its additions wrote, so that its
    inventory and shard checks account for them."""
    records = read_additions(store)
    levels = added_levels(records)
    added = [entry for record in records for entry in _current(record, levels)]
    if not added:
        return manifest
    shards = (*manifest.shards, *added)
    totals = dataclasses.replace(manifest.totals, shards=len(shards))
    return dataclasses.replace(manifest, shards=shards, totals=totals)


def verify_additions(
    report: VerifyReport, store: Store, *, full: bool, sample: int, shards_checked: bool
) -> None:
    """Everything the module's docstring lists; `shards_checked`: the level shards' sizes
    and checksums were checked already (our own dataset's manifest lists them)."""
    additions = read_additions(store)
    if not additions:
        return
    info, keys = _levels_named(store)
    current = added_levels(additions)  # a level replaced later is no longer checked
    directories: list[str] = []
    documents: dict[str, str] = {}  # the last digest recorded for each document
    levels: list[tuple[str, dict[str, Any]]] = []
    for added in additions:
        for member, name in added.plan.get("adds", {}).items():
            if info.get(member) != name:
                report.problems.append(
                    f"info: names {member} {info.get(member)!r}, not the {name!r} that "
                    f"shardwright added (job {str(added.job)[:12]})"
                )
        for level in added.plan.get("levels", []):
            if current.get(str(level.get("key"))) is not added:
                continue
            if str(level.get("key")) not in keys:
                job = str(added.job)[:12]
                report.problems.append(
                    f"names no level {level.get('key')!r}, added by shardwright (job {job})"
                )
            else:
                levels.append((str(level["key"]), added.plan))
        for where in added.companions:
            name = where.rstrip("/").rpartition("/")[2]
            if name in info.values() and name not in directories:
                directories.append(name)
        for replaced in added.plan.get("replaces") or []:  # its array's document went too
            documents = {k: d for k, d in documents.items() if not k.startswith(f"{replaced}/")}
        documents.update((k, d) for k, d in added.metadata.items() if k != "info")
        if not shards_checked:
            _check_entries(report, store, added, current)
    _check_documents(report, store, documents)
    verify_directories(report, store, directories, full=full, sample=sample)
    for key, plan in levels:
        _check_reduction(report, store, keys, key, plan, full=full, sample=sample)
    added_names = [*(f"{n}/" for n in directories), *documents, *(f"level {k}" for k, _ in levels)]
    report.notes.append(f"added by shardwright in place: {', '.join(added_names)}")


def _levels_named(store: Store) -> tuple[dict[str, Any], list[str]]:
    """The dataset's metadata document (a precomputed info, or an OME-Zarr group's) and the
    keys of its levels, finest first."""
    for _, reader in readers():
        try:
            document = json.loads(store.read(reader.metadata_key))
        except (FileNotFoundError, ValueError):
            continue
        if not isinstance(document, dict):
            break
        return document, reader.levels(document)
    return {}, []


def _current(added: Manifest, levels: dict[str, Manifest]) -> list[ShardEntry]:
    """The level shards an addition's record lists, less those of levels a later addition
    replaced (deleted once it named the new ones); `levels`: lifecycle's added_levels."""
    return [e for e in added.shards if levels.get(e.key.partition("/")[0]) is added]


def _check_entries(
    report: VerifyReport, store: Store, added: Manifest, levels: dict[str, Manifest]
) -> None:
    """Each level shard the addition's record lists: there, with its size and crc32c."""
    for entry in _current(added, levels):
        report.shards_checked += 1
        size = store.size(entry.key)
        if size is None:
            report.problems.append(f"{entry.key}: missing (added by shardwright)")
        elif size != entry.size:
            report.problems.append(f"{entry.key}: size {size}, its record says {entry.size}")
        elif (crc := stream_crc32c(store, entry.key, size)) != entry.crc32c:
            report.problems.append(
                f"{entry.key}: crc32c {crc:08x}, its record says {entry.crc32c:08x}"
            )


def _check_documents(report: VerifyReport, store: Store, documents: dict[str, str]) -> None:
    for key, digest in documents.items():
        try:
            found = hashlib.sha256(store.read(key)).hexdigest()
        except FileNotFoundError:
            found = "absent"
        if found != digest:
            report.problems.append(f"{key}: not the document shardwright wrote ({found})")


def _check_reduction(
    report: VerifyReport,
    store: Store,
    keys: list[str],
    key: str,
    plan: dict[str, Any],
    *,
    full: bool,
    sample: int,
) -> None:
    """The added level `key` against the scale below it, reduced by the step between their
    voxel sizes with the method the record names."""
    below_key = keys[keys.index(key) - 1]
    method = str(plan.get("levels_method") or "")
    if method not in METHODS:
        report.problems.append(f"level {key}: its record names no reduction to compare with")
        return
    try:
        level = open_source(store.url, scale_key=key, storage_options=store.storage_options)
        below = open_source(store.url, scale_key=below_key, storage_options=store.storage_options,
                            fill_missing=bool(plan.get("fill_missing")))  # fmt: skip
    except ShardwrightError as exc:
        report.problems.append(f"level {key}: cannot be read to compare ({exc})")
        return
    factor = factor_between(below.hints.resolution, level.hints.resolution)
    if factor is None:  # what readers see: the two levels' own voxel sizes
        report.problems.append(
            f"level {key}: its voxel size {level.hints.resolution} is no whole-number step of "
            f"level {below_key}'s ({below.hints.resolution})"
        )
        return
    boxes = [
        (pyramid.triple(corner), pyramid.triple(min(c + BOX, n) for c, n in
                                                 zip(corner, level.shape_xyz, strict=True)))
        for corner in itertools.product(*(range(0, n, BOX) for n in level.shape_xyz))
    ]  # fmt: skip
    if not full and len(boxes) > sample:
        picked = np.random.default_rng(0).choice(len(boxes), sample, replace=False)
        boxes = [boxes[int(i)] for i in sorted(picked)]
    differ = 0
    for box in boxes:
        start, stop = pyramid.preimage(box, factor, below.shape_xyz)
        want = downsample(np, below.read(start, stop), factor, method)
        got = np.asarray(level.read(*box))
        same = got == want
        if got.dtype.kind in "fc":  # NaN equals NaN, as readers read it
            same |= np.isnan(got) & np.isnan(want)
        differ += int(np.count_nonzero(~same))
        report.chunks_compared += 1
    if differ:
        report.problems.append(
            f"level {key}: {differ:,} voxels differ from level {below_key} reduced by "
            f"{pyramid.triple(factor)} ({method})"
        )
