"""Neuroglancer precomputed volumes (sharded or not), one scale, read chunk by chunk here.

Read here rather than through TensorStore because the volumes the field holds were mostly
written by CloudVolume/Igneous, whose storage conventions TensorStore does not read: local
chunks under a compression suffix (`<chunk>.gz`, `.br`, `.zstd`) and objects stored with a
`Content-Encoding` (stored_forms.py); TensorStore takes such a volume for empty and reads
zeros. And a chunk that is absent is refused here, naming it, unless the user asked for
`fill_missing` (missing.py) — the fill value where data was lost is no conversion.

Reads take coordinates relative to the scale's voxel offset ([0, size)); the offset itself
travels as a hint, so an output keeps the source's placement.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from shardwright.codecs.base import ChunkEncoding
from shardwright.common.downsample import factor_between
from shardwright.common.vocabulary import VolumeType, names
from shardwright.errors import NAMED, CodecUnavailable, FormatError, SourceError
from shardwright.formats.precomputed.info import PrecomputedScale
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.sources import chunk_reuse, missing
from shardwright.sources.base import ArraySource, Box, SourceHints, json_object
from shardwright.sources.location import Location
from shardwright.sources.request import SourceRequest
from shardwright.sources.stored_forms import NotDecodable, StoredObjects, plain_bytes
from shardwright.stores import open_store

# The leading bytes by which a chunk's own encoding is told from a compressed form of it.
JPEG_START = b"\xff\xd8\xff"
PNG_START = b"\x89PNG\r\n\x1a\n"
SIGNATURES = {"jpeg": JPEG_START, "png": PNG_START, "compresso": b"cpso", "crackle": b"crkl"}


def open_precomputed(request: SourceRequest, location: Location) -> PrecomputedSource:
    """One scale (scale 0 unless the request's `scale_key` names another) of the volume whose
    `info` the location holds; absent chunks are refused unless `fill_missing`."""
    url, storage_options = location.url, request.storage_options
    if request.axes not in (None, "xyzc"):
        raise SourceError(
            f"{url}: a precomputed volume is x,y,z,c; axes {request.axes!r} ({{source_axes}}) "
            "do not apply",
            source_axes=NAMED,
        )
    scale_key, fill_missing = request.scale_key, request.fill_missing
    text = location.documents["info"]
    info = json_object(text, f"{url}/info")
    if info.get("type") not in names(VolumeType):
        raise SourceError(
            f"{url}: info type {info.get('type')!r} is not a volume (image or segmentation)"
        )
    scales = info.get("scales") or []
    keys = [str(s.get("key")) if isinstance(s, dict) else "?" for s in scales]
    if not scales:
        raise SourceError(f"{url}: info lists no scales")
    if scale_key is None:
        index = 0
    elif scale_key.strip("/") in keys:
        index = keys.index(scale_key.strip("/"))
    else:
        raise SourceError(f"{url}: no scale {scale_key!r}; scales are {', '.join(keys)}")
    try:
        scale = PrecomputedScale.from_json(scales[index])
        dtype = np.dtype(str(info["data_type"]))
        channels = int(info.get("num_channels", 1))
        encoding = scale.chunk_decoding()
        encoding.check(dtype, channels, "image")
    except CodecUnavailable as exc:  # compresso, crackle: their package, in one line
        raise SourceError(f"{url}: scale {keys[index]!r}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(
            f"{url}: scale {keys[index]!r} has an info entry this reader cannot use ({exc})"
        ) from exc
    hints = SourceHints(
        resolution=scale.resolution,
        voxel_offset=scale.voxel_offset,
        layer_type=info["type"],
        placed_by=f"its info (scale {scale.key})",
        pyramid_factor=own_step(scales, index),
    )
    digest = volume_digest(info, index)
    return PrecomputedSource(
        url, scale, dtype, channels, hints, storage_options, fill_missing, digest
    )


def own_step(scales: list[Any], index: int) -> tuple[int, int, int] | None:
    """The factor between the info's scales around scale `index` (to the next coarser one,
    else from the finer one before it): the dataset's own pyramid's, which a pyramid made
    from it follows unless given another; None where they are no such step."""
    pair = (index, index + 1) if index + 1 < len(scales) else (index - 1, index)
    if pair[0] < 0:
        return None
    finer, coarser = (
        scales[i].get("resolution") if isinstance(scales[i], dict) else None for i in pair
    )
    return factor_between(finer, coarser)


def volume_digest(info: dict[str, Any], index: int) -> str:
    """The sha256 of what defines the voxels of scale `index`: its entry, the volume's type,
    data type and channels. What else the info holds (the names of meshes, skeletons and
    properties, other scales, a lab's own notes) changes no voxel read here: adding to the
    dataset in place must not make a resumed job's source look changed."""
    volume = {k: info.get(k) for k in ("type", "data_type", "num_channels")}
    volume["scale"] = info["scales"][index]
    return hashlib.sha256(json.dumps(volume, sort_keys=True).encode()).hexdigest()


class PrecomputedSource(ArraySource):
    """One scale of a precomputed volume: a box read fetches the chunks it touches (all of a
    box's chunks in one concurrent batch; a sharded scale's in coalesced ranged reads) and
    decodes them into one Fortran-order [x, y, z, c] block."""

    def __init__(
        self,
        url: str,
        scale: PrecomputedScale,
        dtype: np.dtype,
        channels: int,
        hints: SourceHints,
        storage_options: dict[str, Any] | None,
        fill_missing: bool,
        info_sha256: str,
    ):
        self.scale = scale
        self.fill_missing = fill_missing
        self.info_sha256 = info_sha256
        self.storage_options = storage_options
        self._encoding: ChunkEncoding = scale.chunk_decoding()
        self._store = open_store(f"{url.rstrip('/')}/{scale.key}", storage_options)
        self._objects = StoredObjects(self._store)
        self._sharded: ShardedReader | None = None
        super().__init__(url, (*scale.size, channels), dtype, "xyzc", hints)

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        sx, sy, sz = slices[0], slices[1], slices[2]
        start = (sx.start, sy.start, sz.start)
        stop = (sx.stop, sy.stop, sz.stop)
        shape = (*(b - a for a, b in zip(start, stop, strict=True)), self.num_channels)
        if not math.prod(shape):
            return np.zeros(shape, self.dtype, order="F")
        first = [a // c for a, c in zip(start, self.scale.chunk_size, strict=True)]
        last = [math.ceil(b / c) for b, c in zip(stop, self.scale.chunk_size, strict=True)]
        ranges = [range(f, e) for f, e in zip(first, last, strict=True)]
        coords = [(x, y, z) for z in ranges[2] for y in ranges[1] for x in ranges[0]]
        stored = self._fetch(coords)
        absent = [c for c, data in zip(coords, stored, strict=True) if data is None]
        owned = {c for c in coords if missing.owns(c, self.scale.chunk_size, start)}
        missing.account(
            self.url,
            [self._describe(c) for c in absent],
            owned=len(owned),
            owned_absent=[self._describe(c) for c in absent if c in owned],
            fill_missing=self.fill_missing,
            what="chunk",
            scope=f"of scale {self.scale.key}",
        )
        # every voxel of the box is some chunk's: only absent chunks leave fill to write
        out = (np.zeros if absent else np.empty)(shape, self.dtype, order="F")
        for coord, data in zip(coords, stored, strict=True):
            if data is not None:
                self._place(out, start, coord, data)
        return out

    def _place(
        self, out: np.ndarray, start: tuple[int, ...], coord: tuple[int, int, int], data: bytes
    ) -> None:
        """Decode one chunk into its part of `out` (the box starting at voxel `start`)."""
        lo, hi = self.scale.chunk_bounds(coord)
        shape = (hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], self.num_channels)
        try:
            chunk = self._encoding.decode(
                plain_bytes(data, self._recognizer(shape)), shape, self.dtype
            )
        except NotDecodable as exc:
            raise SourceError(f"{self.url}: chunk {self._describe(coord)}: {exc}") from None
        except (ValueError, FormatError) as exc:
            raise SourceError(
                f"{self.url}: chunk {self._describe(coord)} cannot be decoded as "
                f"{self.scale.encoding} ({exc})"
            ) from None
        box_stop = tuple(a + n for a, n in zip(start, out.shape[:3], strict=True))
        bounds = list(zip(lo, hi, start, box_stop, strict=True))
        inside = tuple(slice(max(a, s) - a, min(b, e) - a) for a, b, s, e in bounds)
        target = tuple(slice(max(a, s) - s, min(b, e) - s) for a, b, s, e in bounds)
        out[target] = chunk[inside]

    def _recognizer(self, shape: tuple[int, int, int, int]) -> Callable[[bytes], bool]:
        """Whether bytes are a chunk in this scale's encoding (rather than a compressed form
        of one): its exact size for raw, its signature for jpeg, png, compresso and crackle,
        the offset of the first channel's data for compressed_segmentation."""
        encoding = self.scale.encoding
        if encoding == "raw":
            size = math.prod(shape) * self.dtype.itemsize
            return lambda data: len(data) == size
        if encoding in SIGNATURES:
            signature = SIGNATURES[encoding]
            return lambda data: data.startswith(signature)
        first_offset = int(shape[3]).to_bytes(4, "little")
        return lambda data: data[:4] == first_offset

    def reusing(self, boxes: Sequence[tuple[Box, Box]]) -> AbstractContextManager[object]:
        """Within, this thread's reads of `boxes` fetch each chunk they share once."""
        uses: Counter[tuple[int, int, int]] = Counter()
        chunk = self.scale.chunk_size
        for start, stop in boxes:
            x, y, z = (
                range(a // c, math.ceil(b / c)) for a, b, c in zip(start, stop, chunk, strict=True)
            )
            uses.update((i, j, k) for k in z for j in y for i in x)
        return chunk_reuse.reusing(self, uses)

    def _fetch(self, coords: list[tuple[int, int, int]]) -> list[bytes | None]:
        """Each chunk's stored bytes, None where the volume has none (kept ones taken from
        the thread's reuse, if any)."""
        reuse = chunk_reuse.active_for(self)
        return self._stored(coords) if reuse is None else reuse.take(coords, self._stored)

    def _stored(self, coords: list[tuple[int, int, int]]) -> list[bytes | None]:
        """Each chunk's stored bytes as fetched from the store."""
        if self.scale.sharding is None:
            found = self._objects.get_many([self.scale.chunk_name(c) for c in coords])
            return list(found.values())
        reader = self._shard_reader()
        ids = [int(i) for i in self.scale.chunk_ids(np.array(coords, dtype=np.int64))]
        by_id = reader.read_many(ids)
        self._refuse_compressed_shards(reader)
        return [by_id[i] for i in ids]

    def _shard_reader(self) -> ShardedReader:
        if self._sharded is None:
            assert self.scale.sharding is not None
            self._sharded = ShardedReader(self.scale.sharding, self._store.read_range)
        return self._sharded

    def _refuse_compressed_shards(self, reader: ShardedReader) -> None:
        """A shard stored under a compression suffix cannot be read by ranges: say so, rather
        than count its chunks as missing."""
        for name in sorted(reader.absent_shards):
            stored = self._objects.stored_form(name)
            if stored is not None:
                raise SourceError(
                    f"{self.url}: shard {self.scale.key}/{name} is stored compressed, as "
                    f"{self.scale.key}/{stored}; readers need shards stored plain (ranged "
                    "reads): decompress it in place"
                )
        reader.absent_shards.clear()

    def _describe(self, coord: tuple[int, int, int]) -> str:
        """A chunk as the user finds it in the store: its key, or its sharded chunk id."""
        if self.scale.sharding is None:
            return f"{self.scale.key}/{self.scale.chunk_name(coord)}"
        chunk_id = int(self.scale.chunk_ids(np.array([coord]))[0])
        shard, _ = self.scale.sharding.locate(np.array([chunk_id], dtype=np.uint64))
        name = self.scale.sharding.shard_filename(int(shard[0]))
        return f"{self.scale.chunk_name(coord)} (id {chunk_id} in {self.scale.key}/{name})"

    def identity(self) -> dict[str, Any]:
        """The volume's `info` (its digest) and where it is: what a resumed job compares."""
        return {"driver": "neuroglancer_precomputed", "scale": self.scale.key,
                "info_sha256": self.info_sha256}  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sharded": None}
