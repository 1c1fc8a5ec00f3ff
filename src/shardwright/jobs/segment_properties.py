"""Segment properties added to a finished segmentation of ours, without converting it again
(`shardwright convert DEST --segment-properties TABLE`).

Everything that can be refused is refused before anything is written: a destination that
holds no dataset of ours (no manifest), one that is no precomputed segmentation, a table that
cannot be written (sources/tables.py), a `segment_properties/info` there that this project
did not write, a job holding the destination. Then, under the destination's lease as any job
writes: `segment_properties/info`, the `info` naming it, and last the manifest recording both
documents' digests (what `verify` proves). Killed before the manifest, the same command run
again writes all three again; until then `verify` names the info the manifest does not know.
"""

from __future__ import annotations

import dataclasses
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
from shardwright.lifecycle.runs import FencedStore
from shardwright.planning.layouts.precomputed import SEGMENT_PROPERTIES
from shardwright.sources.tables import segment_properties_of
from shardwright.stores import open_store

KEY = f"{SEGMENT_PROPERTIES}/info"


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
    if store.exists(KEY) and KEY not in manifest.metadata:
        raise DestinationError(f"{dest}: {KEY} is there and shardwright did not write it")
    where = table if isinstance(table, str) else "the table"
    document = segment_properties_of(table, source_storage_options, where)
    named = {**info, "segment_properties": SEGMENT_PROPERTIES}
    documents = [(KEY, document), ("info", named)]
    lease = Lease(store, manifest.job or "segment-properties")
    lease.acquire()
    try:
        writer = FencedStore(store, lease.job_run)
        for key, written in documents:
            writer.write_text(key, metadata_text(written))
        updated = dataclasses.replace(
            manifest, metadata={**manifest.metadata, **metadata_digests(documents)}
        )
        write_manifest(writer, updated)
    finally:
        lease.release()
    return updated
