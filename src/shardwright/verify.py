"""Check a converted dataset: every shard against the manifest, and voxels against the source.

Structure, size and crc32c of every shard listed in the manifest are always checked (through
ranged reads). With a source, chunks are decoded from the shards and compared with the source's
voxels: a seeded sample by default, every chunk with `full=True`. A pyramid's shards are
checked at every level; its upper levels' voxels are compared with the source's region reduced
level by level (a sample that reads about as much of the source as the base level's).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright import pyramid
from shardwright.downsample import downsample
from shardwright.formats import ome_zarr, zarr3
from shardwright.formats.precomputed_info import PrecomputedInfo
from shardwright.formats.sharding import ShardedReader, ShardFormatError
from shardwright.integrity import check_precomputed_shard, check_zarr3_shard, stream_crc32c
from shardwright.manifest import read_manifest
from shardwright.plan import to_zarr_order
from shardwright.sources import Source, open_source
from shardwright.store import Store

DEFAULT_SAMPLE = 64
JPEG_MEAN_ABS_TOLERANCE = 8.0


@dataclass
class VerifyReport:
    dest: str
    format: str
    shards_checked: int = 0
    chunks_compared: int = 0
    problems: list[str] = field(default_factory=list)

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
        lines += [f"  problem: {p}" for p in self.problems[:50]]
        if len(self.problems) > 50:
            lines.append(f"  ... and {len(self.problems) - 50} more")
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
    manifest = read_manifest(store)
    if manifest is None:
        report = VerifyReport(dest, "unknown")
        report.problems.append(
            "no manifest: the conversion did not complete (run it again with --resume)"
        )
        return report
    report = VerifyReport(dest, manifest["format"])
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
    if manifest["format"] == "precomputed":
        info = PrecomputedInfo.from_json(json.loads(store.read("info")))
        scale = info.scale(manifest["plan"]["scale_key"])
        scales = {s.key: s for s in info.scales}

        def check_precomputed(key: str) -> Any:
            spec = scales[key.rsplit("/", 1)[0]].sharding  # the scale key prefixes the shard
            if spec is None:
                raise ShardFormatError(f"{key}: its scale is not sharded")
            return check_precomputed_shard(store, key, spec)

        _check_shards(report, store, manifest, check_precomputed)
    else:
        metas = _zarr_levels(store)
        meta = next(iter(metas.values()))

        def check_zarr(key: str) -> Any:
            prefix = max((p for p in metas if key.startswith(p)), key=len)
            return check_zarr3_shard(store, key, metas[prefix])

        _check_shards(report, store, manifest, check_zarr)
    if against is not None:
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
        prefixes = list(metas) if report.format == "zarr3" else []
        comparer = (
            _PrecomputedComparer(store, info, scale.key)
            if report.format == "precomputed"
            else _ZarrComparer(store, meta, source.axes, prefixes[0])
        )
        _compare(report, source, comparer, full, sample)
        levels = manifest["plan"].get("levels") or []
        for row in levels[1:]:
            k = row["level"]
            upper = (
                _PrecomputedComparer(store, info, row["key"])
                if report.format == "precomputed"
                else _ZarrComparer(store, metas[prefixes[k]], source.axes, prefixes[k])
            )
            shrink = math.prod(manifest["plan"]["pyramid"]["factor_xyz"]) ** k
            _compare(
                report,
                source,
                upper,
                full,
                max(1, sample // shrink),
                expected=_reduced_reader(source, manifest["plan"], k),
                size=tuple(row["size_xyz"]),
                label=f"level {k} ",
            )
    return report


def _zarr_levels(store: Store) -> dict[str, zarr3.ZarrArrayMetadata]:
    """Array metadata by key prefix: the root array, or each level of a multiscales group."""
    root = json.loads(store.read("zarr.json"))
    paths = ome_zarr.dataset_paths(root)
    if paths is None:
        return {"": zarr3.ZarrArrayMetadata.from_json(root)}
    return {
        f"{path}/": zarr3.ZarrArrayMetadata.from_json(json.loads(store.read(f"{path}/zarr.json")))
        for path in paths
    }


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


def _check_shards(report: VerifyReport, store: Store, manifest: dict[str, Any], check: Any) -> None:
    for entry in manifest["shards"]:
        key = entry["key"]
        report.shards_checked += 1
        try:
            summary = check(key)
        except FileNotFoundError:
            report.problems.append(f"{key}: missing")
            continue
        except (ShardFormatError, ValueError) as exc:
            report.problems.append(f"{key}: unreadable index: {exc}")
            continue
        if summary.size != entry["size"]:
            report.problems.append(f"{key}: size {summary.size}, manifest says {entry['size']}")
            continue
        if summary.chunks != entry["chunks"]:
            report.problems.append(
                f"{key}: {summary.chunks} chunks, manifest says {entry['chunks']}"
            )
        crc = stream_crc32c(store, key, summary.size)
        if crc != entry["crc32c"]:
            report.problems.append(f"{key}: crc32c {crc:08x}, manifest says {entry['crc32c']:08x}")


class _PrecomputedComparer:
    def __init__(self, store: Store, info: PrecomputedInfo, key: str):
        self.scale = info.scale(key)
        self.dtype = np.dtype(info.data_type)
        self.channels = info.num_channels
        self.encoding = self.scale.chunk_encoding()
        assert self.scale.sharding is not None
        self.reader = ShardedReader(
            self.scale.sharding,
            lambda name, start, end: store.read_range(f"{key}/{name}", start, end),
        )

    @property
    def lossy(self) -> bool:
        return self.scale.encoding == "jpeg"

    def read_chunk(
        self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]
    ) -> np.ndarray | None:
        data = self.reader.read(int(self.scale.chunk_ids(np.array([coord]))[0]))
        if data is None:
            return None
        return self.encoding.decode(data, (*shape_xyz, self.channels), self.dtype)  # type: ignore[arg-type]


class _ZarrComparer:
    lossy = False

    def __init__(
        self, store: Store, meta: zarr3.ZarrArrayMetadata, axes: str, prefix: str = ""
    ) -> None:
        self.store, self.meta, self.axes, self.prefix = store, meta, axes, prefix
        self.dtype = np.dtype(meta.data_type).newbyteorder("<")
        self.compressor = meta.compressor.codec(self.dtype.itemsize) if meta.compressor else None
        self.lookup_chunk = dict(zip(axes, meta.chunk_shape, strict=True))
        self.per_shard = dict(zip(axes, meta.chunks_per_shard, strict=True))
        self._readers: dict[str, zarr3.ShardReader | None] = {}

    def read_chunk(
        self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]
    ) -> np.ndarray | None:
        by_axis = dict(zip("xyz", coord, strict=True), c=0)
        shard = tuple(by_axis[a] // self.per_shard[a] for a in self.axes)
        inner = tuple(by_axis[a] % self.per_shard[a] for a in self.axes)
        reader = self._reader(self.prefix + self.meta.chunk_key(shard))
        data = reader.read_chunk(inner) if reader is not None else None
        if data is None:
            block = np.full(self.meta.chunk_shape, self.meta.fill_value, dtype=self.dtype)
        else:
            if self.meta.checksum_inner:
                data = zarr3.strip_crc32c(data)
            if self.compressor is not None:
                data = self.compressor.decompress(data)
            block = np.frombuffer(data, dtype=self.dtype).reshape(self.meta.chunk_shape)
        lookup = dict(zip("xyz", shape_xyz, strict=True), c=self.lookup_chunk.get("c", 1))
        return block[tuple(slice(0, lookup[a]) for a in self.axes)]

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray:
        return to_zarr_order(voxels_xyzc, self.axes)

    def _reader(self, key: str) -> zarr3.ShardReader | None:
        """One reader per shard, so its index is fetched once; None for an absent shard."""
        if key not in self._readers:
            size = self.store.size(key)
            self._readers[key] = (
                None
                if size is None
                else zarr3.ShardReader(
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
    volume of `size`, for pyramid levels)."""
    chunk = (
        comparer.scale.chunk_size
        if isinstance(comparer, _PrecomputedComparer)
        else tuple(comparer.lookup_chunk[a] for a in "xyz")
    )
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
        want = source.read(start, stop) if expected is None else expected(start, stop)
        got = comparer.read_chunk(coord, shape)
        report.chunks_compared += 1
        if got is None:
            report.problems.append(f"{label}chunk {coord}: missing from the output")
            continue
        if isinstance(comparer, _ZarrComparer):
            want = comparer.expected(want)
        if comparer.lossy:
            error = np.abs(got.astype(np.float64) - want.astype(np.float64)).mean()
            if error > JPEG_MEAN_ABS_TOLERANCE:
                report.problems.append(f"{label}chunk {coord}: mean abs error {error:.2f} (jpeg)")
        elif got.shape != want.shape or not np.array_equal(got, want):
            report.problems.append(f"{label}chunk {coord}: voxels differ from the source")


__all__ = ["VerifyReport", "verify"]
