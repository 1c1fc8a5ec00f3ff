"""Check a converted dataset, trusting nothing it holds.

- The manifest is validated (its shape, keys that stay inside the dataset). No manifest says
  the job did not finish; a live lease says a job is writing the dataset now; a retired
  record says an overwrite has not finished removing the dataset it replaced.
- Each metadata object (`info`, `zarr.json`) must be byte for byte what the job wrote (its
  sha256 in the manifest) and parse.
- The shards the metadata's geometry calls for are compared with the manifest and with a
  listing of the store: shards missing, shards the manifest does not record, objects that
  are no shard of the dataset, and (zarr3) shards neither stored nor recorded as empty.
- Every shard the manifest lists: its structure (indexes parse, point inside the object,
  list the chunks they should), size and crc32c.
- With a source, where the output sits is compared with where the source sits (voxel size,
  offset, axes, unit: `placement.py`), and chunks are decoded and compared with its voxels:
  a seeded sample by default, every chunk with `full=True`. A pyramid's upper levels are
  compared with the source's region reduced level by level. A chunk that cannot be decoded
  is one problem naming its shard, and the comparison goes on.

A destination with no manifest but an `info` or `zarr.json` (a sharded dataset TensorStore,
Igneous or zarr-python wrote) is checked as its format defines it (`foreign.py`): "no manifest:
format-level checks only". What shardwright added to a dataset in place (its meshes and
skeletons, ours or another tool's dataset) is checked as its own manifests prove it.

Every problem is reported, each naming the object and what differs; `ok` is False when there
is any. Only a destination that cannot be read at all raises.
"""

from __future__ import annotations

from typing import Any

from shardwright.common import deadlines
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import DestinationError
from shardwright.sources import Source, missing, open_source
from shardwright.stores import open_store
from shardwright.verification.additions import verify_additions, with_added
from shardwright.verification.annotation_table import compare_with_table
from shardwright.verification.annotations import verify_annotations
from shardwright.verification.compare import compare_levels, judge_absent, same_size
from shardwright.verification.foreign import verify_foreign
from shardwright.verification.objects import verify_companions, verify_objects
from shardwright.verification.placement import check_placement
from shardwright.verification.report import DEFAULT_SAMPLE, VerifyReport
from shardwright.verification.shards import check_inventory, check_shards, dataset_of
from shardwright.verification.state import (
    check_metadata,
    check_state,
    foreign_metadata,
    manifest_of,
)


def verify(
    dest: str,
    against: str | Source | None = None,
    *,
    full: bool = False,
    sample: int = DEFAULT_SAMPLE,
    source_axes: str | None = None,
    source_scale: str | None = None,
    storage_options: dict[str, Any] | None = None,
    source_storage_options: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> VerifyReport:
    """Check the dataset in `dest` (and, with `against`, its voxels against the source: a
    seeded sample of `sample` chunks, or every chunk with `full`); every problem is in the
    report, none raises, unless the destination cannot be read at all. `timeout`: seconds to
    wait for a store that does not answer (deadlines.py)."""
    if timeout is not None:
        deadlines.set_timeout(timeout)
    store = open_store(dest, storage_options)
    if store.is_file():
        raise DestinationError(
            f"{store.url} is a file: verify reads a dataset's folder (its manifest, its info "
            "or zarr.json, its shards)"
        )
    report = VerifyReport(dest, "unknown")
    opening = {  # absent source chunks are counted and judged, not refused
        "axes": source_axes,
        "scale_key": source_scale,
        "storage_options": source_storage_options,
        "fill_missing": True,
    }
    manifest = manifest_of(report, store)
    if manifest is None:
        metadata_key = foreign_metadata(store)
        if metadata_key is not None:  # written by another tool: what its format defines
            source = None if against is None else _source(report, against, opening)
            if against is None or source is not None:
                verify_foreign(report, store, metadata_key, source, full=full, sample=sample,
                               against=against, scale=source_scale,
                               storage_options=storage_options)  # fmt: skip
            verify_additions(report, store, full=full, sample=sample, shards_checked=False)
        return report
    report.format = manifest.format
    manifest = with_added(manifest, store)  # the level shards added in place count as its own
    check_state(report, store)
    documents = check_metadata(report, store, manifest)
    verify_companions(report, store, manifest, full=full, sample=sample)  # generated objects
    verify_additions(report, store, full=full, sample=sample, shards_checked=True)
    if manifest.dataset == DatasetKind.ANNOTATIONS:
        if documents is not None and "info" in documents:
            verify_annotations(report, store, manifest, documents["info"])
            if against is not None:  # a table: a path or URL, or a DataFrame
                compare_with_table(report, store, manifest, documents["info"], against,
                                   source_storage_options)  # fmt: skip
        return report
    if manifest.dataset == DatasetKind.GENERATED:  # made from a volume: its shards, as read
        verify_objects(report, store, manifest, None, full=full, sample=sample,
                       source_storage_options=None)  # fmt: skip
        return report
    if manifest.dataset == DatasetKind.OBJECTS:  # meshes or skeletons
        if against is not None and not isinstance(against, str):
            raise TypeError("meshes and skeletons verify against a source path or URL")
        verify_objects(
            report,
            store,
            manifest,
            against,
            full=full,
            sample=sample,
            source_storage_options=source_storage_options,
        )
        return report
    dataset = dataset_of(report, store, documents)
    if dataset is None:  # no usable metadata: sizes and checksums are all that can be checked
        check_shards(report, store, manifest, None)
        return report
    check_inventory(report, store, manifest, dataset)
    check_shards(report, store, manifest, dataset.check_shard)
    if against is not None:
        # Read as the job read it: the scale and axes its plan records, unless given here.
        recorded = manifest.plan.get("source_scale")
        opening["scale_key"] = read_at = source_scale or recorded
        opening["axes"] = source_axes or manifest.plan.get("source_axes")
        source = _source(report, against, opening)
        size = manifest.plan.get("size_xyz") or dataset.comparers[0].size
        if source is None or not same_size(report, source, size, against, read_at, recorded):
            return report
        if documents is not None:
            check_placement(report, manifest.plan, documents, source)
        with missing.counting() as absent:
            compare_levels(report, manifest, dataset.comparers, source, full, sample)
        judge_absent(report, manifest, absent, source, against)
    return report


def _source(report: VerifyReport, against: str | Source, opening: dict[str, Any]) -> Source | None:
    """The source to compare with (a Source as it is; a URL or an array opened), or None with
    the problem that it cannot be read."""
    try:
        return open_source(against, **opening)
    except ValueError as exc:
        report.problems.append(f"source {against}: cannot be read ({exc})")
        return None
