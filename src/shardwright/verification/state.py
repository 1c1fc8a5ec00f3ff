"""The destination's state: its manifest (validated), live leases and retired records, and
the metadata objects byte for byte as the manifest records them."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import ManifestError
from shardwright.lifecycle.journal import JOB_KEY, RETIRED
from shardwright.lifecycle.lease import current_lease
from shardwright.lifecycle.manifest import Manifest, owned_keys, read_manifest
from shardwright.planning.formats import readers
from shardwright.stores import Store
from shardwright.verification.report import VerifyReport


# -- the destination's state --------------------------------------------------------------
def manifest_of(report: VerifyReport, store: Store) -> Manifest | None:
    """The validated manifest, or None with the problem that explains why there is none (no
    problem for a dataset another tool wrote: `foreign_metadata`)."""
    try:
        manifest = read_manifest(store)
    except ManifestError as exc:
        report.problems.append(str(exc))
        return None
    if manifest is not None:
        return manifest
    if store.is_file():
        report.problems.append(f"{store.url} is a file, not a dataset")
    elif store.is_empty():
        empty_folder = store.is_local and os.path.isdir(store.root)
        report.problems.append(
            f"{store.url} is an empty folder: nothing to verify"
            if empty_folder
            else f"{store.url}: not found (no dataset there to verify)"
        )
    elif store.exists(JOB_KEY):
        report.problems.append(
            "no manifest: the job that writes this dataset did not finish (run the same "
            "convert again with --resume)"
        )
    elif foreign_metadata(store) is None:
        report.problems.append(
            f"{store.url} holds no shardwright manifest, and no info, zarr.json or Zarr v2 "
            "group: not a dataset"
        )
    return None


def foreign_metadata(store: Store) -> str | None:
    """The metadata object of a dataset another tool wrote (`info`, `zarr.json`, a Zarr v2
    group's `.zattrs`), where the destination holds no trace of a shardwright job; None
    otherwise."""
    if store.exists(MANIFEST_KEY) or store.exists(JOB_KEY):
        return None
    for _, reader in readers():
        if all(store.exists(key) for key in (reader.metadata_key, *reader.beside)):
            return reader.metadata_key
    return None


def check_state(report: VerifyReport, store: Store) -> None:
    """A job writing the dataset now, or an overwrite's removals not finished."""
    found = current_lease(store)
    if found is not None:
        _, holder, heard = found
        if holder is None:
            report.problems.append("an unreadable lease locks the dataset")
        elif not (holder.gone_here() or time.time() - heard > holder.timeout):
            report.problems.append(
                f"a job is writing this dataset now: {holder.describe(heard, time.time())}"
            )
        else:
            report.notes.append("a stopped job's lease remains (the next job takes it over)")
    retired = store.list_keys(RETIRED.rstrip("/"))
    if retired:
        report.problems.append(
            f"an overwrite did not finish removing the dataset it replaced ({len(retired)} "
            "record(s) under .shardwright/retired/): run the same convert again with --resume"
        )


def check_metadata(report: VerifyReport, store: Store, manifest: Manifest) -> dict[str, Any] | None:
    """Each metadata object, checked against the sha256 the manifest recorded and parsed;
    None when one is missing or does not parse."""
    recorded: dict[str, str | None] = dict(manifest.metadata)
    if not recorded:  # a manifest older than the digests: the objects its format has
        shard_keys = {s.key for s in manifest.shards}
        recorded = {k: None for k in owned_keys(manifest) if k not in shard_keys}
    documents: dict[str, Any] | None = {}
    for key, digest in recorded.items():
        try:
            data = store.read(key)
        except FileNotFoundError:
            report.problems.append(f"{key}: missing")
            documents = None
            continue
        actual = hashlib.sha256(data).hexdigest()
        if digest is not None and actual != digest:
            report.problems.append(
                f"{key}: not what the job wrote (sha256 {actual[:12]}..., the manifest records "
                f"{digest[:12]}...)"
            )
        try:
            document = json.loads(data)
        except ValueError as exc:
            report.problems.append(f"{key}: not valid JSON ({exc})")
            documents = None
            continue
        if documents is not None:
            documents[key] = document
    return documents
