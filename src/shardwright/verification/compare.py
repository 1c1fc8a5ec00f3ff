"""Voxels against the source: sampled (or all) chunks decoded and compared, pyramid levels with
the source reduced level by level, jpeg within a tolerance."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from shardwright.common.downsample import RULES, downsample
from shardwright.formats.precomputed.info import PrecomputedInfo
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.zarr3 import metadata as zarr3_metadata
from shardwright.formats.zarr3 import sharding as zarr3_sharding
from shardwright.formats.zarr3.chunks import InnerChunkChain
from shardwright.lifecycle.manifest import Manifest
from shardwright.planning import pyramid, to_zarr_order
from shardwright.planning.geometry import to_axes
from shardwright.planning.text import xyz
from shardwright.sources import Source, missing
from shardwright.stores import Store
from shardwright.verification.report import JPEG_MEAN_ABS_TOLERANCE, VerifyReport

Corner = tuple[int, ...]
BoxReader = Callable[[Corner, Corner], np.ndarray]  # voxels [x, y, z, c] of [start, stop)


class ChunkComparer(Protocol):
    """One stored level as verify reads it, whatever its format: its chunk shape (x, y, z),
    where a chunk lies, a chunk decoded, and the source's voxels in the stored layout."""

    @property
    def chunk(self) -> tuple[int, ...]: ...

    @property
    def size(self) -> tuple[int, int, int]:
        """The level's size in voxels (x, y, z)."""
        ...

    @property
    def lossy(self) -> bool:
        """Its chunks are compared within a tolerance (jpeg)."""
        ...

    def shard_of(self, coord: pyramid.Triple) -> str: ...

    def read_chunk(self, coord: pyramid.Triple, shape_xyz: tuple[int, ...]) -> np.ndarray | None:
        """The stored chunk at grid `coord`, cut to `shape_xyz`; None where none is stored."""
        ...

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray: ...


# -- voxels against the source ------------------------------------------------------------
def judge_absent(
    report: VerifyReport, manifest: Manifest, absent: missing.Tally, source: Source, url: object
) -> None:
    """What the source's absent chunks mean: expected where the job wrote absent chunks as
    the source's fill value (and said so in its manifest), a problem where it did not (the
    source changed since, or was read as empty); and a note when everything compared was 0."""
    if absent.missing:
        shown = ", ".join(absent.examples)
        found = (
            f"{absent.missing} of the {absent.looked_at} source chunks read are not stored "
            f"in {url} (first: {shown})"
        )
        if manifest.totals.source_chunks_missing:
            filled = manifest.totals.source_chunks_missing
            report.notes.append(
                f"{found}; the job wrote {filled} absent source chunk(s) as the source's fill "
                f"value ({missing.fill_of(source)})"
            )
        else:
            report.problems.append(
                f"{found}, but the job recorded none: the source changed since it was "
                "converted, or the job read it as empty"
            )
    if report.chunks_compared and not report.nonzero_compared:
        report.notes.append(
            "every compared chunk is 0 in both the source and the output: this comparison "
            "cannot tell an empty volume from one read as nothing"
        )


def same_size(
    report: VerifyReport,
    source: Source,
    size: Sequence[int],
    url: object,
    scale: str | None,
    recorded: str | None = None,
) -> bool:
    """Whether the source as read has the output's size (x, y, z). Read at another scale of
    an image pyramid than the job read (`recorded` in its plan, where it says; an old
    manifest does not) it has not: one problem naming the scale and the flag, and no voxels
    compared."""
    if tuple(source.shape_xyz) == tuple(size):
        return True
    read = f"its scale {scale}" if scale else "its finest scale (no --source-scale)"
    report.problems.append(
        f"source {url}: at {read} it is {xyz(source.shape_xyz)} voxels, the output "
        f"{xyz(size)} (x,y,z): not what was converted; pass --source-scale "
        + (recorded if recorded else "naming the scale the job read")
    )
    return False


def compare_levels(
    report: VerifyReport,
    manifest: Manifest,
    comparers: list[ChunkComparer],
    source: Source,
    full: bool,
    sample: int,
) -> None:
    plan = manifest.plan
    base = comparers[0]
    if base.lossy:
        report.notes.append(
            f"jpeg chunks compared within a mean absolute error of {JPEG_MEAN_ABS_TOLERANCE:g}"
        )
    compare_chunks(report, source, base, full, sample)
    levels = plan.get("levels") or []
    if len(levels) > 1 and plan["pyramid"].get("rules", 1) != RULES:
        method = plan["pyramid"]["method"]
        report.notes.append(
            f"the pyramid was written under earlier downsampling rules ({method} then meant "
            "another reduction): its upper levels are not compared with the source"
        )
        return
    for row, upper in zip(levels[1:], comparers[1:], strict=False):
        k = row["level"]
        shrink = math.prod(pyramid.scale_of(pyramid.steps_of(plan["pyramid"]), k))
        compare_chunks(
            report,
            source,
            upper,
            full,
            max(1, sample // shrink),
            expected=_reduced_reader(source, plan, k),
            size=tuple(row["size_xyz"]),
            label=f"level {k} ",
        )


def _reduced_reader(source: Source, plan: dict[str, Any], level: int) -> BoxReader:
    """Voxels of a box of pyramid level `level`, recomputed from the source level by level."""
    steps = pyramid.steps_of(plan["pyramid"])
    method = plan["pyramid"]["method"]
    sizes = [pyramid.triple(row["size_xyz"]) for row in plan["levels"]]

    def read(start: tuple[int, ...], stop: tuple[int, ...]) -> np.ndarray:
        box: pyramid.Box = (pyramid.triple(start), pyramid.triple(stop))
        for k in range(level, 0, -1):
            box = pyramid.preimage(box, steps[k - 1], sizes[k - 1])
        block = source.read(*box)
        for step in steps[:level]:
            block = downsample(np, block, step, method)
        return block

    return read


class PrecomputedComparer:
    def __init__(self, store: Store, info: PrecomputedInfo, key: str):
        self.scale = info.scale(key)
        self.dtype = np.dtype(info.data_type)
        self.channels = info.num_channels
        self.encoding = self.scale.chunk_encoding()
        self.chunk = self.scale.chunk_size
        self.size = self.scale.size
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
        x, y, z = shape_xyz
        return self.encoding.decode(data, (x, y, z, self.channels), self.dtype)

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray:
        return voxels_xyzc


class ZarrComparer:
    lossy = False

    def __init__(
        self, store: Store, meta: zarr3_metadata.ZarrArrayMetadata, axes: str, prefix: str = ""
    ) -> None:
        self.store, self.meta, self.axes, self.prefix = store, meta, axes, prefix
        self.chain = InnerChunkChain.of(meta)
        self.lookup_chunk = dict(zip(axes, meta.chunk_shape, strict=True))
        self.chunk = tuple(self.lookup_chunk[a] for a in "xyz")
        shape = dict(zip(axes, meta.shape, strict=True))
        self.size = pyramid.triple(shape[a] for a in "xyz")
        self.per_shard = dict(zip(axes, meta.chunks_per_shard, strict=True))
        self._readers: dict[str, zarr3_sharding.ShardReader | None] = {}

    def shard_of(self, coord: tuple[int, int, int]) -> str:
        at = to_axes(coord, 0, self.axes)
        shard = tuple(i // self.per_shard[a] for i, a in zip(at, self.axes, strict=True))
        return self.prefix + self.meta.chunk_key(shard)

    def read_chunk(
        self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]
    ) -> np.ndarray | None:
        at = to_axes(coord, 0, self.axes)
        inner = tuple(i % self.per_shard[a] for i, a in zip(at, self.axes, strict=True))
        reader = self._reader(self.shard_of(coord))
        block = self.chain.decode(reader.read_chunk(inner) if reader is not None else None)
        shape = to_axes(shape_xyz, self.lookup_chunk.get("c", 1), self.axes)
        return block[tuple(slice(0, n) for n in shape)]

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


class SourceComparer:
    """A level no shard holds (another tool's unsharded dataset: CloudVolume's chunk files, a
    zarr array of plain chunks), read through shardwright's own source readers in boxes of
    `chunk`: a box that cannot be read is a problem, as a chunk that cannot be decoded."""

    def __init__(self, level: Source, chunk: tuple[int, ...], lossy: bool = False) -> None:
        self.level, self.lossy = level, lossy
        self.size = pyramid.triple(level.shape_xyz)
        self.chunk = tuple(min(c, s) for c, s in zip(chunk, self.size, strict=True))

    def shard_of(self, coord: pyramid.Triple) -> str:
        return "none: not sharded"

    def read_chunk(self, coord: pyramid.Triple, shape_xyz: tuple[int, ...]) -> np.ndarray:
        start = pyramid.triple(g * c for g, c in zip(coord, self.chunk, strict=True))
        stop = pyramid.triple(a + n for a, n in zip(start, shape_xyz, strict=True))
        return self.level.read(start, stop)

    def expected(self, voxels_xyzc: np.ndarray) -> np.ndarray:
        return voxels_xyzc


def compare_chunks(
    report: VerifyReport,
    source: Source,
    comparer: ChunkComparer,
    full: bool,
    sample: int,
    expected: BoxReader | None = None,
    size: tuple[int, ...] | None = None,
    label: str = "",
) -> None:
    """Compare sampled chunks with the source's voxels (or with `expected(start, stop)` over a
    volume of `size`, for pyramid levels). A chunk that cannot be read or decoded is one
    problem naming its shard; the others are still compared."""
    chunk = comparer.chunk
    size = size or source.shape_xyz
    for coord, start, stop in chunk_boxes(size, chunk, full, sample):
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        want = comparer.expected(
            source.read(start, stop) if expected is None else expected(start, stop)
        )
        report.nonzero_compared |= bool(np.any(want))
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
        elif (differ := differing(got, want)).any():
            first = tuple(int(i) for i in np.argwhere(differ)[0])
            report.problems.append(
                f"{where}: {int(differ.sum())} of {differ.size} voxels differ from the source "
                f"(first at {first}: {got[first]} instead of {want[first]})"
            )


def differing(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where two blocks of voxels differ, as TensorStore and NumPy's `equal_nan` read them: a
    NaN equals a NaN (a float volume's "no data"); a NaN where the other holds a number is
    still a difference. Complex voxels are compared part by part."""
    if got.dtype.kind == want.dtype.kind == "c":
        return differing(got.real, want.real) | differing(got.imag, want.imag)
    differ = np.asarray(got != want)
    if got.dtype.kind == want.dtype.kind == "f":
        differ &= ~(np.isnan(got) & np.isnan(want))
    return differ


def chunk_boxes(
    size: tuple[int, ...], chunk: tuple[int, ...], full: bool, sample: int
) -> Iterator[tuple[pyramid.Triple, pyramid.Triple, pyramid.Triple]]:
    """(grid coordinate, voxel start, voxel stop) of every chunk of a level of `size` (with
    `full`, or when there are no more than `sample`), else of a seeded sample of `sample`."""
    grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
    total = math.prod(grid)
    if full or total <= sample:
        flat = np.arange(total)
    else:
        flat = np.sort(np.random.default_rng(0).choice(total, size=sample, replace=False))
    for index in flat.tolist():
        coord = pyramid.triple(int(v) for v in np.unravel_index(index, grid, order="F"))
        start = pyramid.triple(g * c for g, c in zip(coord, chunk, strict=True))
        stop = pyramid.triple(min(a + c, s) for a, c, s in zip(start, chunk, size, strict=True))
        yield coord, start, stop


def decode_chunks(
    report: VerifyReport,
    comparer: ChunkComparer,
    full: bool,
    sample: int,
    skip: Collection[str] = (),
    label: str = "",
) -> None:
    """Decode chunks of one stored level (every one with `full`, else a seeded sample), with
    no source to compare them with: a chunk that cannot be read or decoded is a problem naming
    its shard; shards in `skip` (already found broken) are not read again."""
    for coord, start, stop in chunk_boxes(comparer.size, comparer.chunk, full, sample):
        shard = comparer.shard_of(coord)
        if shard in skip:
            continue
        shape = tuple(b - a for a, b in zip(start, stop, strict=True))
        try:
            comparer.read_chunk(coord, shape)
        except FileNotFoundError:
            continue  # an absent shard reads as the fill value
        except Exception as exc:  # noqa: BLE001 - a corrupt chunk must not end the run
            report.problems.append(
                f"{label}chunk {coord} (shard {shard}): cannot be decoded "
                f"({type(exc).__name__}: {exc})"
            )
            continue
        report.chunks_decoded += 1
