"""Segment properties added to a finished segmentation of ours, without converting it again
(`shardwright convert DEST --segment-properties TABLE`).

Everything that can be refused is refused before anything is written: a destination that
holds no dataset of ours (no manifest), one that is no precomputed segmentation, a table that
cannot be written (sources/tables.py), a `segment_properties/info` there that this project
did not write, a job holding the destination. Then, under the destination's lease as any job
writes: `segment_properties/info`, the `info` naming it, and last the manifest recording both
documents' digests (what `verify` proves). The digest of the document about to be written is
recorded first under `.shardwright/`: killed before the manifest, the same command run again
finds the document it left proven its own and writes all three again; until then `verify`
names the info the manifest does not know.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from shardwright.errors import DestinationError
from shardwright.lifecycle.destination import readable_manifest
from shardwright.lifecycle.lease import Lease
from shardwright.lifecycle.manifest import (
    VOLUME,
    Manifest,
    metadata_digests,
    metadata_text,
    write_manifest,
)
from shardwright.lifecycle.runs import CONTROL_DIR, FencedStore
from shardwright.planning.layouts.precomputed import SEGMENT_PROPERTIES
from shardwright.sources.tables import segment_properties_of
from shardwright.stores import Store, open_store

KEY = f"{SEGMENT_PROPERTIES}/info"
INTENT = f"{CONTROL_DIR}/segment-properties.json"  # the digest of the document a run writes


def add_segment_properties(
    dest: str,
    table: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    source_storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Write `table`'s segment properties beside the segmentation in `dest`; returns the
    dataset's manifest as it now stands."""
    store = open_store(dest, storage_options)
    manifest = readable_manifest(store)
    if manifest is None:
        raise DestinationError(
            f"{dest}: no dataset of shardwright's (no manifest); convert the segmentation with "
            "{segment_properties} instead",
            segment_properties=table if isinstance(table, str) else "TABLE",
        )
    info = json.loads(store.read("info", small=True)) if manifest.format == "precomputed" else {}
    if manifest.dataset != VOLUME or info.get("type") != "segmentation":
        raise DestinationError(
            f"{dest}: segment properties describe a precomputed segmentation; this is a "
            f"{manifest.format} {info.get('type', manifest.dataset)}"
        )
    if store.exists(KEY) and KEY not in manifest.metadata and not _intended(store):
        raise DestinationError(f"{dest}: {KEY} is there and shardwright did not write it")
    where = table if isinstance(table, str) else "the table"
    document = segment_properties_of(table, source_storage_options, where)
    named = {**info, "segment_properties": SEGMENT_PROPERTIES}
    documents = [(KEY, document), ("info", named)]
    digests = metadata_digests(documents)
    updated = dataclasses.replace(manifest, metadata={**manifest.metadata, **digests})
    lease = Lease(store, manifest.job or "segment-properties")
    lease.acquire()
    try:
        writer = FencedStore(store, lease.job_run)
        # What is about to be written, first: a run killed before the manifest proves with it
        # that the document it left is its own, and the same command run again goes on.
        writer.write_text(INTENT, json.dumps({KEY: digests[KEY]}))
        for key, written in documents:
            writer.write_text(key, metadata_text(written))
        write_manifest(writer, updated)
        writer.delete(INTENT)
    finally:
        lease.release()
    return updated


def _intended(store: Store) -> bool:
    """Whether the document at KEY is the one an earlier run recorded it would write."""
    try:
        intended = json.loads(store.read(INTENT, small=True)).get(KEY)
        found = hashlib.sha256(store.read(KEY, small=True)).hexdigest()
    except (FileNotFoundError, ValueError, AttributeError):
        return False
    return bool(intended == found)
