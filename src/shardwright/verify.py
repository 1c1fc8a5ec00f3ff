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
- With a source, chunks are decoded and compared with the source's voxels: a seeded sample by
  default, every chunk with `full=True`. A pyramid's upper levels are compared with the
  source's region reduced level by level. A chunk that cannot be decoded is one problem
  naming its shard, and the comparison goes on.

Every problem is reported, each naming the object and what differs; `ok` is False when there
is any. Only a destination that cannot be read at all raises.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright import pyramid
from shardwright.downsample import downsample
from shardwright.errors import ManifestError, ShardFormatError
from shardwright.formats import ome_zarr, zarr3_metadata, zarr3_sharding
from shardwright.formats.precomputed_info import PrecomputedInfo
from shardwright.formats.sharding import ShardedReader
from shardwright.integrity import check_precomputed_shard, check_zarr3_shard, stream_crc32c
from shardwright.lifecycle.journal import JOB_KEY, RETIRED
from shardwright.lifecycle.lease import current_lease
from shardwright.manifest import owned_keys, read_manifest
from shardwright.plan import to_zarr_order
from shardwright.sources import Source, open_source
from shardwright.store import Store

DEFAULT_SAMPLE = 64
JPEG_MEAN_ABS_TOLERANCE = 8.0
SHOWN_PROBLEMS = 50


@dataclass
class VerifyReport:
    dest: str
    format: str
    shards_checked: int = 0
    chunks_compared: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the comparison was made

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        state = "OK" if self.ok else f"FAILED ({len(self.problems)} problem(s))"
        lines = [
            f"verify {self.dest} ({self.format}): {state}",
            f"  shards checked   {self.shards_checked}",
            f"  chunks compared  {self.chunks_compared}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  problem: {p}" for p in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > SHOWN_PROBLEMS:
            lines.append(f"  ... and {len(self.problems) - SHOWN_PROBLEMS} more")
        return "\n".join(lines)


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
) -> VerifyReport:
    store = Store(dest, storage_options)
    report = VerifyReport(dest, "unknown")
    manifest = _manifest(report, store)
    if manifest is None:
        return report
    report.format = manifest["format"]
    _check_state(report, store)
    documents = _check_metadata(report, store, manifest)
    if "object_type" in manifest["plan"]:  # meshes or skeletons
        from shardwright.verify_objects import verify_objects

        if against is not None and not isinstance(against, str):
            raise TypeError("meshes and skeletons verify against a source path or URL")
        verify_objects(
            report,
            store,
            manifest,
            _check_shards,
            against,
            full=full,
            sample=sample,
            source_storage_options=source_storage_options,
        )
        return report
    dataset = _dataset(report, store, manifest, documents)
    if dataset is None:  # no usable metadata: sizes and checksums are all that can be checked
        _check_shards(report, store, manifest, None)
        return report
    _check_inventory(report, store, manifest, dataset)
    _check_shards(report, store, manifest, dataset.check_shard)
    if against is not None:
        try:
            source = (
                against
                if not isinstance(against, str)
                else open_source(
                    against,
                    axes=source_axes,
                    scale_key=source_scale,
                    storage_options=source_storage_options,
                )
            )
        except ValueError as exc:
            report.problems.append(f"source {against}: cannot be read ({exc})")
            return report
        _compare_levels(report, manifest, dataset, source, full, sample)
    return report


# -- the destination's state --------------------------------------------------------------
def _manifest(report: VerifyReport, store: Store) -> dict[str, Any] | None:
    """The validated manifest, or None with the problem that explains why there is none."""
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
        report.problems.append(f"{store.url} does not exist or is empty: nothing to verify")
    elif store.exists(JOB_KEY):
        report.problems.append(
            "no manifest: the job that writes this dataset did not finish (run the same "
            "convert again with --resume)"
        )
    else:
        report.problems.append(f"{store.url} holds no shardwright manifest: not a dataset of ours")
    return None


def _check_state(report: VerifyReport, store: Store) -> None:
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


def _check_metadata(
    report: VerifyReport, store: Store, manifest: dict[str, Any]
) -> dict[str, Any] | None:
    """Each metadata object, checked against the sha256 the manifest recorded and parsed;
    None when one is missing or does not parse."""
    recorded: dict[str, str | None] = dict(manifest.get("metadata") or {})
    if not recorded:  # a manifest older than the digests: the objects its format has
        shard_keys = {s["key"] for s in manifest["shards"]}
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


# -- the dataset's geometry ---------------------------------------------------------------
@dataclass
class _Dataset:
    """What the metadata says: the shards its geometry calls for and how to read them."""

    expected: set[str]  # every shard key of the geometry (zarr3: empty ones included)
    listed: set[str]  # what the store holds where shards live
    check_shard: Callable[[str], Any]
    comparers: list[Any]  # one per level, the base first
    may_skip_empty: bool  # zarr3 stores no all-fill shard


def _dataset(
    report: VerifyReport,
    store: Store,
    manifest: dict[str, Any],
    documents: dict[str, Any] | None,
) -> _Dataset | None:
    if documents is None:
        return None
    try:
        if manifest["format"] == "precomputed":
            return _precomputed_dataset(store, documents["info"])
        return _zarr_dataset(store, documents)
    except (KeyError, TypeError, ValueError) as exc:
        report.problems.append(f"the metadata does not describe a dataset: {exc}")
        return None


def _precomputed_dataset(store: Store, info_json: Any) -> _Dataset:
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

    comparers = [_PrecomputedComparer(store, info, s.key) for s in info.scales if s.sharding]
    return _Dataset(expected, listed, check, comparers, may_skip_empty=False)


def _zarr_dataset(store: Store, documents: dict[str, Any]) -> _Dataset:
    root = documents["zarr.json"]
    paths = ome_zarr.dataset_paths(root)
    if paths is None:
        metas = {"": zarr3_metadata.ZarrArrayMetadata.from_json(root)}
    else:
        metas = {
            f"{path}/": zarr3_metadata.ZarrArrayMetadata.from_json(documents[f"{path}/zarr.json"])
            for path in paths
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
        raise ValueError("zarr.json records no dimension_names: its axes are unknown")
    axes = "".join(str(n) for n in names)
    comparers = [_ZarrComparer(store, meta, axes, prefix) for prefix, meta in metas.items()]
    return _Dataset(expected, listed, check, comparers, may_skip_empty=True)


def _check_inventory(
    report: VerifyReport, store: Store, manifest: dict[str, Any], dataset: _Dataset
) -> None:
    """The geometry's shards against the manifest's and the store's."""
    recorded = [s["key"] for s in manifest["shards"]]
    recorded_set = set(recorded)
    if len(recorded_set) != len(recorded):
        report.problems.append("the manifest lists some shards more than once")
    if manifest["totals"].get("shards") != len(recorded):
        report.problems.append(
            f"the manifest's totals say {manifest['totals'].get('shards')} shards, it lists "
            f"{len(recorded)}"
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
    empty = manifest["totals"].get("empty_shards_skipped", 0)
    if len(unrecorded) != empty:
        report.problems.append(
            f"the manifest accounts for {len(recorded_set & dataset.expected)} of the "
            f"{len(dataset.expected)} shards of the geometry and says {empty} were empty; "
            f"{len(unrecorded) - empty} are unaccounted for"
        )


def _check_shards(
    report: VerifyReport,
    store: Store,
    manifest: dict[str, Any],
    check: Callable[[str], Any] | None,
) -> None:
    """Every shard the manifest lists: structure (when `check` is given), size and crc32c.
    Whatever fails reading one shard is that shard's problem; the others are checked."""
    for entry in manifest["shards"]:
        key = entry["key"]
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
            cause = str(exc).removeprefix(f"{key}: ")
            report.problems.append(f"{key}: unreadable index ({type(exc).__name__}: {cause})")
            continue
        if size != entry["size"]:
            report.problems.append(f"{key}: size {size}, the manifest says {entry['size']}")
            continue
        if chunks is not None and chunks != entry["chunks"]:
            report.problems.append(f"{key}: {chunks} chunks, the manifest says {entry['chunks']}")
        crc = stream_crc32c(store, key, size)
        if crc != entry["crc32c"]:
            report.problems.append(
                f"{key}: crc32c {crc:08x}, the manifest says {entry['crc32c']:08x}"
            )


# -- voxels against the source ------------------------------------------------------------
def _compare_levels(
    report: VerifyReport,
    manifest: dict[str, Any],
    dataset: _Dataset,
    source: Source,
    full: bool,
    sample: int,
) -> None:
    plan = manifest["plan"]
    base = dataset.comparers[0]
    if base.lossy:
        report.notes.append(
            f"jpeg chunks compared within a mean absolute error of {JPEG_MEAN_ABS_TOLERANCE:g}"
        )
    _compare(report, source, base, full, sample)
    levels = plan.get("levels") or []
    for row, upper in zip(levels[1:], dataset.comparers[1:], strict=False):
        k = row["level"]
        shrink = math.prod(plan["pyramid"]["factor_xyz"]) ** k
        _compare(
            report,
            source,
            upper,
            full,
            max(1, sample // shrink),
            expected=_reduced_reader(source, plan, k),
            size=tuple(row["size_xyz"]),
            label=f"level {k} ",
        )


def _reduced_reader(source: Source, plan: dict[str, Any], level: int) -> Any:
    """Voxels of a box of pyramid level `level`, recomputed from the source level by level."""
    factor = pyramid.triple(plan["pyramid"]["factor_xyz"])
    method = plan["pyramid"]["method"]
    sizes = [pyramid.triple(row["size_xyz"]) for row in plan["levels"]]

    def read(start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        box: pyramid.Box = (pyramid.triple(start), pyramid.triple(stop))
        for k in range(level, 0, -1):
            box = pyramid.preimage(box, factor, sizes[k - 1])
        block = source.read(*box)
        for _ in range(level):
            block = downsample(np, block, factor, method)
        return block

    return read


class _PrecomputedComparer:
    def __init__(self, store: Store, info: PrecomputedInfo, key: str):
        self.scale = info.scale(key)
        self.dtype = np.dtype(info.data_type)
        self.channels = info.num_channels
        self.encoding = self.scale.chunk_encoding()
        self.chunk = self.scale.chunk_size
        assert self.scale.sharding is not None
        self.spec = self.scale.sharding
        self.reader = ShardedReader(
            self.spec, lambda name, start, end: store.read_range(f"{key}/{name}", start, end)
        )

    @property
    def lossy(self) -> bool:
        return self.scale.encoding == "jpeg"

    def shard_of(self, coord: tuple[int, int, int]) -> str:
        shard, _ = self.spec.locate(self.scale.chunk_ids(np.array([coord])))
        return f"{self.scale.key}/{self.spec.shard_filename(int(shard[0]))}"

    def read_chunk(
        self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]
    ) -> np.ndarray | None:
        data = self.reader.read(int(self.scale.chunk_ids(np.array([coord]))[0]))
        if data is None:
            return None
        return self.encoding.decode(data, (*shape_xyz, self.channels), self.dtype)  # type: ignore[arg-type]

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray:
        return voxels_xyzc


class _ZarrComparer:
    lossy = False

    def __init__(
        self, store: Store, meta: zarr3_metadata.ZarrArrayMetadata, axes: str, prefix: str = ""
    ) -> None:
        self.store, self.meta, self.axes, self.prefix = store, meta, axes, prefix
        self.dtype = np.dtype(meta.data_type).newbyteorder("<")
        self.compressor = meta.compressor.codec(self.dtype.itemsize) if meta.compressor else None
        self.lookup_chunk = dict(zip(axes, meta.chunk_shape, strict=True))
        self.chunk = tuple(self.lookup_chunk[a] for a in "xyz")
        self.per_shard = dict(zip(axes, meta.chunks_per_shard, strict=True))
        self._readers: dict[str, zarr3_sharding.ShardReader | None] = {}

    def shard_of(self, coord: tuple[int, int, int]) -> str:
        by_axis = dict(zip("xyz", coord, strict=True), c=0)
        shard = tuple(by_axis[a] // self.per_shard[a] for a in self.axes)
        return self.prefix + self.meta.chunk_key(shard)

    def read_chunk(
        self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]
    ) -> np.ndarray | None:
        by_axis = dict(zip("xyz", coord, strict=True), c=0)
        inner = tuple(by_axis[a] % self.per_shard[a] for a in self.axes)
        reader = self._reader(self.shard_of(coord))
        data = reader.read_chunk(inner) if reader is not None else None
        if data is None:
            block = np.full(self.meta.chunk_shape, self.meta.fill_value, dtype=self.dtype)
        else:
            if self.meta.checksum_inner:
                data = zarr3_sharding.strip_crc32c(data)
            if self.compressor is not None:
                data = self.compressor.decompress(data)
            block = np.frombuffer(data, dtype=self.dtype).reshape(self.meta.chunk_shape)
        lookup = dict(zip("xyz", shape_xyz, strict=True), c=self.lookup_chunk.get("c", 1))
        return block[tuple(slice(0, lookup[a]) for a in self.axes)]

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray:
        return to_zarr_order(voxels_xyzc, self.axes)

    def _reader(self, key: str) -> zarr3_sharding.ShardReader | None:
        """One reader per shard, so its index is fetched once; None for an absent shard."""
        if key not in self._readers:
            size = self.store.size(key)
            self._readers[key] = (
                None
                if size is None
                else zarr3_sharding.ShardReader(
                    lambda s, e: self.store.read_range(key, s, e),
                    self.meta.chunks_per_shard,
                    self.meta.index_location,
                    object_size=size,
                )
            )
        return self._readers[key]


def _compare(
    report: VerifyReport,
    source: Source,
    comparer: Any,
    full: bool,
    sample: int,
    expected: Any = None,
    size: tuple[int, ...] | None = None,
    label: str = "",
) -> None:
    """Compare sampled chunks with the source's voxels (or with `expected(start, stop)` over a
    volume of `size`, for pyramid levels). A chunk that cannot be read or decoded is one
    problem naming its shard; the others are still compared."""
    chunk = comparer.chunk
    size = size or source.shape_xyz
    grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
    total = math.prod(grid)
    if full or total <= sample:
        flat = np.arange(total)
    else:
        flat = np.sort(np.random.default_rng(0).choice(total, size=sample, replace=False))
    for index in flat.tolist():
        coord = tuple(int(v) for v in np.unravel_index(index, grid, order="F"))
        start = tuple(g * c for g, c in zip(coord, chunk, strict=True))
        stop = tuple(min(a + c, s) for a, c, s in zip(start, chunk, size, strict=True))
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        want = comparer.expected(
            source.read(start, stop) if expected is None else expected(start, stop)
        )
        where = f"{label}chunk {coord} (shard {comparer.shard_of(coord)})"
        report.chunks_compared += 1
        try:
            got = comparer.read_chunk(coord, shape)
        except FileNotFoundError:
            report.problems.append(f"{where}: its shard is missing")
            continue
        except Exception as exc:  # noqa: BLE001 - a corrupt chunk must not end the run
            report.problems.append(f"{where}: cannot be decoded ({type(exc).__name__}: {exc})")
            continue
        if got is None:
            report.problems.append(f"{where}: missing from the output")
            continue
        if comparer.lossy:
            error = np.abs(got.astype(np.float64) - want.astype(np.float64)).mean()
            if error > JPEG_MEAN_ABS_TOLERANCE:
                report.problems.append(f"{where}: mean absolute error {error:.2f} (jpeg)")
        elif got.shape != want.shape:
            report.problems.append(f"{where}: shape {got.shape}, the source's is {want.shape}")
        elif not np.array_equal(got, want):
            differ = got != want
            first = tuple(int(i) for i in np.argwhere(differ)[0])
            report.problems.append(
                f"{where}: {int(differ.sum())} of {differ.size} voxels differ from the source "
                f"(first at {first}: {got[first]} instead of {want[first]})"
            )


__all__ = ["VerifyReport", "verify"]
