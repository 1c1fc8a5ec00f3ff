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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardwright.common import deadlines
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import DestinationError
from shardwright.lifecycle.manifest import Manifest
from shardwright.sources import Source, missing, open_source
from shardwright.stores import Store, open_store
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

Documents = dict[str, Any] | None  # the dataset's metadata objects, parsed (None: unreadable)


@dataclass(frozen=True)
class _Asked:
    """What `verify` was asked, handed to the check of the dataset's kind."""

    against: str | Source | None
    full: bool
    sample: int
    source_axes: str | None
    source_scale: str | None
    storage_options: dict[str, Any] | None
    source_storage_options: dict[str, Any] | None

    def opening(self, **recorded: Any) -> dict[str, Any]:
        """How the source is opened: absent chunks counted and judged, not refused."""
        return {
            "axes": self.source_axes or recorded.get("axes"),
            "scale_key": self.source_scale or recorded.get("scale_key"),
            "storage_options": self.source_storage_options,
            "fill_missing": True,
        }


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
    asked = _Asked(against, full, sample, source_axes, source_scale, storage_options,
                   source_storage_options)  # fmt: skip
    manifest = manifest_of(report, store)
    if manifest is None:
        _verify_foreign_dataset(report, store, asked)
        return report
    report.format = manifest.format
    manifest = with_added(manifest, store)  # the level shards added in place count as its own
    check_state(report, store)
    documents = check_metadata(report, store, manifest)
    verify_companions(report, store, manifest, full=full, sample=sample)  # generated objects
    verify_additions(report, store, full=full, sample=sample, shards_checked=True)
    BY_KIND.get(manifest.dataset, _verify_volume)(report, store, manifest, documents, asked)
    return report


def _verify_foreign_dataset(report: VerifyReport, store: Store, asked: _Asked) -> None:
    """No manifest: what its format defines, where another tool wrote it, and what
    shardwright added to it in place."""
    metadata_key = foreign_metadata(store)
    if metadata_key is None:
        return
    against = asked.against
    source = None if against is None else _source(report, against, asked.opening())
    if against is None or source is not None:
        verify_foreign(report, store, metadata_key, source, full=asked.full, sample=asked.sample,
                       against=against, scale=asked.source_scale,
                       storage_options=asked.storage_options)  # fmt: skip
    verify_additions(report, store, full=asked.full, sample=asked.sample, shards_checked=False)


def _verify_annotation_set(report: VerifyReport, store: Store, manifest: Manifest,
                           documents: Documents, asked: _Asked) -> None:  # fmt: skip
    if documents is None or "info" not in documents:
        return
    verify_annotations(report, store, manifest, documents["info"])
    if asked.against is not None:  # a table: a path or URL, or a DataFrame
        compare_with_table(report, store, manifest, documents["info"], asked.against,
                           asked.source_storage_options)  # fmt: skip


def _verify_generated(report: VerifyReport, store: Store, manifest: Manifest,
                      documents: Documents, asked: _Asked) -> None:  # fmt: skip
    """Made from a volume: its shards, as read."""
    verify_objects(report, store, manifest, None, full=asked.full, sample=asked.sample,
                   source_storage_options=None)  # fmt: skip


def _verify_object_set(report: VerifyReport, store: Store, manifest: Manifest,
                       documents: Documents, asked: _Asked) -> None:  # fmt: skip
    """Meshes or skeletons converted from a directory of them."""
    if asked.against is not None and not isinstance(asked.against, str):
        raise TypeError("meshes and skeletons verify against a source path or URL")
    verify_objects(report, store, manifest, asked.against, full=asked.full, sample=asked.sample,
                   source_storage_options=asked.source_storage_options)  # fmt: skip


def _verify_volume(report: VerifyReport, store: Store, manifest: Manifest,
                   documents: Documents, asked: _Asked) -> None:  # fmt: skip
    """Its shards, and with a source, where it sits and its voxels level by level."""
    dataset = dataset_of(report, store, documents)
    if dataset is None:  # no usable metadata: sizes and checksums are all that can be checked
        check_shards(report, store, manifest, None)
        return
    check_inventory(report, store, manifest, dataset)
    check_shards(report, store, manifest, dataset.check_shard)
    if asked.against is None:
        return
    # Read as the job read it: the scale and axes its plan records, unless given here.
    recorded = manifest.plan.get("source_scale")
    read_at = asked.source_scale or recorded
    opening = asked.opening(scale_key=recorded, axes=manifest.plan.get("source_axes"))
    source = _source(report, asked.against, opening)
    size = manifest.plan.get("size_xyz") or dataset.comparers[0].size
    if source is None or not same_size(report, source, size, asked.against, read_at, recorded):
        return
    if documents is not None:
        check_placement(report, manifest.plan, documents, source)
    with missing.counting() as absent:
        compare_levels(report, manifest, dataset.comparers, source, asked.full, asked.sample)
    judge_absent(report, manifest, absent, source, asked.against)


# Each dataset kind's check (a volume's where none is named).
BY_KIND: dict[str, Callable[[VerifyReport, Store, Manifest, Documents, _Asked], None]] = {
    DatasetKind.ANNOTATIONS: _verify_annotation_set,
    DatasetKind.GENERATED: _verify_generated,
    DatasetKind.OBJECTS: _verify_object_set,
}


def _source(report: VerifyReport, against: str | Source, opening: dict[str, Any]) -> Source | None:
    """The source to compare with (a Source as it is; a URL or an array opened), or None with
    the problem that it cannot be read."""
    try:
        return open_source(against, **opening)
    except ValueError as exc:
        report.problems.append(f"source {against}: cannot be read ({exc})")
        return None
