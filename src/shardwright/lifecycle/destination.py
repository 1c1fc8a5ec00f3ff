"""Which destinations a job may write, decided before anything is written.

A destination is ours when it holds our marker (a job record or lease under `.shardwright/`,
or a manifest); `--resume` and `--overwrite` act only on ours or on an empty destination.
Whatever the flags, a destination is refused when it is a plain file, holds anything we did
not write, is the source or lies inside it or around it (same bucket and prefix for object
stores), or is the current directory, one of its parents or the home directory: writing
there could bury or, on a later overwrite, delete what the user keeps.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from shardwright.common.control_keys import CONTROL_PREFIX, MANIFEST_KEY
from shardwright.common.urls import local_path, scheme_of
from shardwright.errors import DestinationError, ManifestError
from shardwright.lifecycle import fingerprint as fingerprints
from shardwright.lifecycle.journal import JOB_KEY, read_job
from shardwright.lifecycle.lease import LEASE_NAME
from shardwright.lifecycle.manifest import Manifest, read_manifest
from shardwright.stores import Store

if TYPE_CHECKING:
    from shardwright.planning.base import Plan

LOOKS = 5  # at a destination whose only entries are in `.shardwright/`: about 1.5 s in all


@dataclass(frozen=True)
class Holding:
    """What a destination holds: nothing, a plain file, something not ours, or ours (with
    its job record and manifest, when they exist)."""

    kind: str  # "empty" | "file" | "foreign" | "ours"
    example: str | None = None  # an object that is not ours (foreign)
    job: dict[str, Any] | None = None
    manifest: Manifest | None = None

    @property
    def dataset(self) -> bool:
        """Ours and more than a lease: a job started writing here."""
        return self.kind == "ours" and (self.job is not None or self.manifest is not None)


def inspect(store: Store, looks: int = LOOKS) -> Holding:
    """What `store` holds. A job that starts beside this one may take its lease and write
    its first objects between the look at our marks and the look at the rest: an object found
    there is foreign only if our marks are still absent after it was found (a job takes its
    lease before it writes anything else). While the first entry found lies under
    `.shardwright/` (another job's temporary there, the lease not yet linked), the destination
    is looked at again, a little later each time (`looks` in all), so that it reads as that
    job's, not as foreign; a loaded machine took longer than one look."""
    if store.is_file():
        return Holding("file")
    ours = _our_marks(store)
    if ours is not None:
        return ours
    example = store.first_entry()
    if example is None:
        return Holding("empty")
    ours = _our_marks(store)  # a job begun while the rest was looked at
    if ours is not None:
        return ours
    control_dir = CONTROL_PREFIX.rstrip("/")  # object stores name the folder, disks a file in it
    if looks > 1 and example.split("/", 1)[0] == control_dir:
        time.sleep(0.1 * 2 ** (LOOKS - looks))
        return inspect(store, looks - 1)
    return Holding("foreign", example=example)


def _our_marks(store: Store) -> Holding | None:
    """The destination as ours when it holds a job record, a manifest or a lease."""
    control = store.list_sizes(CONTROL_PREFIX.rstrip("/"))
    manifest = readable_manifest(store)
    try:
        job = read_job(store) if JOB_KEY.removeprefix(CONTROL_PREFIX) in control else None
    except ManifestError as exc:
        raise DestinationError(
            f"{exc}; shardwright cannot tell what this destination holds, so it changes "
            "nothing there"
        ) from None
    if job is not None or manifest is not None or any(LEASE_NAME.fullmatch(n) for n in control):
        return Holding("ours", job=job, manifest=manifest)
    return None


def readable_manifest(store: Store) -> Manifest | None:
    """The destination's manifest (None: there is none); one that does not parse (cut short,
    edited) is a DestinationError saying how to recover: the job's record and receipts still
    prove its shards, so without the manifest `--resume` keeps them and writes it again."""
    try:
        return read_manifest(store)
    except ManifestError as exc:
        raise DestinationError(
            f"{exc}; shardwright changes nothing there. If shardwright wrote this dataset, "
            f"delete {MANIFEST_KEY} and run the same convert with {{resume}}: the shards its "
            "receipts prove are kept and the manifest is written again",
            resume=True,
        ) from None


def check_holding(
    store: Store,
    holding: Holding,
    *,
    mode: str,
    job: str,
    fingerprint: fingerprints.Fingerprint,
    words: dict[str, str] | None = None,
) -> None:
    """Refuse a destination this mode ("new", "resume" or "overwrite") must not write; a
    resume of another job names what differs (`words`: this job's options by name)."""
    url = store.url
    if holding.kind == "file":
        raise DestinationError(f"destination {url} is a file; name a folder for the dataset")
    if holding.kind == "foreign":
        raise DestinationError(
            f"destination {url} holds files shardwright did not write (e.g. "
            f"{holding.example}); choose a new or empty destination. {{overwrite}} replaces "
            "only shardwright datasets",
            overwrite=True,
        )
    if not holding.dataset:
        return
    state = "a complete" if holding.manifest is not None else "an unfinished"
    if mode == "new":
        raise DestinationError(
            f"destination {url} is not empty: it holds {state} shardwright dataset; pass "
            "{resume} to continue the job that wrote it or {overwrite} to replace it",
            resume=True,
            overwrite=True,
        )
    if mode != "resume":
        return
    recorded = holding.job or {}
    written_by = recorded.get("job") or (holding.manifest.job if holding.manifest else None)
    if written_by is None:
        raise DestinationError(
            f"cannot resume into {url}: its dataset was written by a shardwright that kept no "
            "job record, so its shards cannot be proven; pass {overwrite} to replace it",
            overwrite=True,
        )
    if written_by != job:
        found = fingerprints.differences(
            recorded.get("fingerprint") or {}, fingerprint, recorded.get("options"), words
        )
        raise DestinationError(
            f"cannot resume into {url}: this job differs from the one that wrote it "
            f"(different source or options?): {'; '.join(found) or 'fingerprints differ'}. "
            "Pass the same source and options, or {overwrite} to replace it",
            overwrite=True,
        )


# -- where a destination lies ---------------------------------------------------------------
@dataclass(frozen=True)
class Place:
    """A location comparable across URLs: scheme, the store (bucket and endpoint) and the
    path's parts."""

    scheme: str
    store: str
    parts: tuple[str, ...]
    endpoint: str | None = None

    def contains(self, other: Place) -> bool:
        same_store = self.scheme == other.scheme and self.store == other.store
        endpoints_differ = None not in (self.endpoint, other.endpoint) and (
            self.endpoint != other.endpoint
        )
        return same_store and not endpoints_differ and other.parts[: len(self.parts)] == self.parts


def place(url: str, storage_options: Mapping[str, Any] | None = None) -> Place:
    """Where `url` points; local paths resolved (symlinks, `..`, the current directory)."""
    scheme = scheme_of(url)
    if scheme in ("", "file"):
        path = local_path(url)  # file.h5#/dataset: the file; a folder named `a#b`: itself
        if glob.has_magic(path) and not os.path.exists(path) and glob.glob(path):  # slices
            path = path[: min(path.index(c) for c in "*?[" if c in path)]
            path = path if path.endswith(os.sep) else os.path.dirname(path)
        resolved = os.path.realpath(path or ".").split(os.sep)
        return Place("file", "", tuple(p for p in resolved if p))
    parsed = urlparse(url)
    options = storage_options or {}
    endpoint = options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")
    scheme = {"gcs": "gs", "s3a": "s3"}.get(scheme, scheme)
    parts = tuple(p for p in parsed.path.split("/") if p)
    return Place(scheme, parsed.netloc, parts, endpoint)


def check_location(
    dest: str,
    dest_options: Mapping[str, Any] | None,
    sources: Iterable[tuple[str, Mapping[str, Any] | None]],
) -> None:
    """Refuse a destination that is, holds or lies inside a source, or that is the current
    directory, one of its parents or the home directory."""
    where = place(dest, dest_options)
    if where.scheme == "file":
        cwd = place(os.getcwd())
        if where.contains(cwd):
            raise DestinationError(
                f"destination {dest} is the current directory or one of its parents; name a "
                "new folder for the dataset"
            )
        if where == place(os.path.expanduser("~")):
            raise DestinationError(
                f"destination {dest} is the home directory; name a new folder for the dataset"
            )
    for source, source_options in sources:
        there = place(source, source_options)
        if where.contains(there) and there.contains(where):
            raise DestinationError(f"destination {dest} is the source {source} itself")
        if where.contains(there):
            raise DestinationError(
                f"destination {dest} contains the source {source}; a dataset goes in a folder "
                "of its own, not around its source"
            )
        if there.contains(where):
            raise DestinationError(
                f"destination {dest} lies inside the source {source}; writing there would "
                "change the source"
            )


def plan_sources(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """The source a plan reads, with its storage options (none for an array in memory)."""
    url = plan.source_url
    return [] if url is None else [(url, plan.options.source_storage_options)]


def check_plan_places(plan: Plan) -> None:
    """`check_location` for every destination of a plan (a volume's, its meshes' and
    skeletons'), from the names alone: `plan` refuses them before it prints, as a job does
    before it reads its destinations."""
    for part in (plan, *plan.companions):  # an addition: inside the dataset it reads
        sources = [] if plan.in_place else plan_sources(part)
        check_location(part.dest, part.options.storage_options, sources)
