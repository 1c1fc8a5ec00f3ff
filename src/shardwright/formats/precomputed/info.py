"""The `info` JSON of a precomputed volume: layer type, data type, channels and scales.

Validates what readers would reject (and what a converter must refuse before writing): unknown
encodings, encoding/dtype mismatches, multiple chunk sizes with sharding, and scale keys that
escape the dataset root.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwright.codecs import ChunkEncoding, chunk_decoding, chunk_encoding
from shardwright.common.vocabulary import VolumeType, names
from shardwright.errors import InfoError
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.formats.precomputed.sharding import ShardingSpec

VOLUME_TYPE = "neuroglancer_multiscale_volume"
LAYER_TYPES = names(VolumeType)
# Neuroglancer's data types: what it reads from precomputed, and from zarr too.
DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
LABEL_DTYPES = (np.dtype(np.uint32), np.dtype(np.uint64))  # what compressed_segmentation takes


def _triple(value: Any, name: str, kind: type = int, positive: bool = False) -> tuple[Any, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3:
        raise InfoError(f"{name} must be a 3-element [x, y, z] array, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InfoError(f"{name} must hold numbers, got {value!r}")
        if kind is int and v != int(v):
            raise InfoError(f"{name} must hold integers, got {value!r}")
        if positive and v <= 0:
            raise InfoError(f"{name} must be positive, got {value!r}")
        out.append(kind(v))
    return tuple(out)


def check_scale_key(key: str) -> str:
    """Refuse keys that are empty, absolute, or whose `..` parts climb out of the dataset."""
    if not isinstance(key, str) or not key:
        raise InfoError(f"scale key must be a non-empty string, got {key!r}")
    normalized = posixpath.normpath(key)
    if key.startswith("/") or "://" in key or normalized == "." or normalized.startswith(".."):
        raise InfoError(f"scale key {key!r} escapes the dataset root")
    return key


@dataclass(frozen=True)
class PrecomputedScale:
    """One resolution level; sizes and offsets in voxels, written x, y, z."""

    key: str
    size: tuple[int, int, int]
    resolution: tuple[float, float, float]
    chunk_size: tuple[int, int, int]
    encoding: str = "raw"
    voxel_offset: tuple[int, int, int] = (0, 0, 0)
    compressed_segmentation_block_size: tuple[int, int, int] | None = None
    sharding: ShardingSpec | None = None

    def __post_init__(self) -> None:
        check_scale_key(self.key)
        object.__setattr__(self, "size", _triple(self.size, "size", positive=True))
        object.__setattr__(
            self, "resolution", _triple(self.resolution, "resolution", float, positive=True)
        )
        object.__setattr__(
            self, "chunk_size", _triple(self.chunk_size, "chunk_size", positive=True)
        )
        object.__setattr__(self, "voxel_offset", _triple(self.voxel_offset, "voxel_offset"))
        if (self.encoding == "compressed_segmentation") != (
            self.compressed_segmentation_block_size is not None
        ):
            raise InfoError(
                "compressed_segmentation_block_size must be given if, and only if, the encoding "
                f"is compressed_segmentation (scale {self.key!r}, encoding {self.encoding!r})"
            )
        if self.compressed_segmentation_block_size is not None:
            object.__setattr__(
                self,
                "compressed_segmentation_block_size",
                _triple(
                    self.compressed_segmentation_block_size,
                    "compressed_segmentation_block_size",
                    positive=True,
                ),
            )

    def chunk_encoding(self, jpeg_quality: int | None = None) -> ChunkEncoding:
        """The codec of this scale's chunks (jpeg quality is not recorded in `info`; None:
        the codec's default)."""
        options: dict[str, Any] = {}
        if self.compressed_segmentation_block_size is not None:
            options["block_size"] = self.compressed_segmentation_block_size
        if self.encoding == "jpeg" and jpeg_quality is not None:
            options["quality"] = jpeg_quality
        return chunk_encoding(self.encoding, **options)

    def chunk_decoding(self) -> ChunkEncoding:
        """The codec a source's chunks of this scale are read with: any encoding written, and
        those read only (compresso, crackle: `codecs.READ_ENCODINGS`)."""
        options: dict[str, Any] = {}
        if self.compressed_segmentation_block_size is not None:
            options["block_size"] = self.compressed_segmentation_block_size
        return chunk_decoding(self.encoding, **options)

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        """Chunks per axis, x, y, z (edge chunks are truncated, so this rounds up)."""
        x, y, z = (math.ceil(s / c) for s, c in zip(self.size, self.chunk_size, strict=True))
        return (x, y, z)

    def chunk_ids(self, grid_coords: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Sharded chunk ids (compressed Morton codes) of (N, 3) grid coordinates."""
        return compressed_morton_code(grid_coords, self.grid_shape)

    def chunk_shard_numbers(self, batch: int = 1 << 20) -> Iterator[npt.NDArray[np.uint64]]:
        """The shard number of every chunk of a sharded scale, in batches of grid order
        (x fastest), computed vectorized."""
        if self.sharding is None:
            raise InfoError(f"scale {self.key!r} is not sharded")
        grid = self.grid_shape
        total = math.prod(grid)
        for first in range(0, total, batch):
            flat = np.arange(first, min(first + batch, total), dtype=np.int64)
            coords = np.stack(np.unravel_index(flat, grid, order="F"), axis=1)
            shard, _ = self.sharding.locate(self.chunk_ids(coords))
            yield shard

    def shard_numbers(self) -> list[int]:
        """The shards of a sharded scale that hold at least one chunk, in order."""
        seen: set[int] = set()
        for shard in self.chunk_shard_numbers():
            seen.update(np.unique(shard).tolist())
        return sorted(seen)

    def chunk_bounds(self, grid_coord: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """[start, stop) voxel bounds (relative to voxel_offset) of one grid cell, truncated."""
        start = tuple(g * c for g, c in zip(grid_coord, self.chunk_size, strict=True))
        stop = tuple(
            min(s + c, n) for s, c, n in zip(start, self.chunk_size, self.size, strict=True)
        )
        return start, stop

    def chunk_name(self, grid_coord: Sequence[int]) -> str:
        """The unsharded chunk file name ``x0-x1_y0-y1_z0-z1`` (absolute voxel coordinates)."""
        start, stop = self.chunk_bounds(grid_coord)
        parts = [f"{o + a}-{o + b}" for o, a, b in zip(self.voxel_offset, start, stop, strict=True)]
        return "_".join(parts)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PrecomputedScale:
        for name in ("key", "size", "resolution", "chunk_sizes", "encoding"):
            if name not in obj:
                raise InfoError(f"scale is missing {name!r}: {dict(obj)!r}")
        chunk_sizes = obj["chunk_sizes"]
        if not isinstance(chunk_sizes, list) or not chunk_sizes:
            raise InfoError(f"chunk_sizes must be a non-empty list, got {chunk_sizes!r}")
        sharding = obj.get("sharding")
        if sharding is not None and len(chunk_sizes) != 1:
            raise InfoError(f"a sharded scale must list exactly one chunk size, got {chunk_sizes}")
        block = obj.get("compressed_segmentation_block_size")
        return cls(
            key=obj["key"],
            size=obj["size"],
            resolution=obj["resolution"],
            chunk_size=chunk_sizes[0],
            encoding=str(obj["encoding"]).lower(),
            voxel_offset=obj.get("voxel_offset", (0, 0, 0)),
            compressed_segmentation_block_size=None if block is None else tuple(block),
            sharding=None if sharding is None else ShardingSpec.from_json(sharding),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "size": list(self.size),
            "resolution": [int(r) if float(r).is_integer() else r for r in self.resolution],
            "voxel_offset": list(self.voxel_offset),
            "chunk_sizes": [list(self.chunk_size)],
            "encoding": self.encoding,
        }
        if self.compressed_segmentation_block_size is not None:
            out["compressed_segmentation_block_size"] = list(
                self.compressed_segmentation_block_size
            )
        if self.sharding is not None:
            out["sharding"] = self.sharding.to_json()
        return out


@dataclass(frozen=True)
class PrecomputedInfo:
    """A multiscale volume's `info`; unknown top-level members are kept in `extra`."""

    type: str
    data_type: str
    num_channels: int
    scales: tuple[PrecomputedScale, ...]
    mesh: str | None = None
    skeletons: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scales", tuple(self.scales))
        if self.type not in LAYER_TYPES:
            raise InfoError(f"type must be one of {LAYER_TYPES}, got {self.type!r}")
        if self.data_type not in DATA_TYPES:
            raise InfoError(f"data_type must be one of {DATA_TYPES}, got {self.data_type!r}")
        if (
            isinstance(self.num_channels, bool)
            or not isinstance(self.num_channels, int)
            or (self.num_channels < 1)
        ):
            raise InfoError(f"num_channels must be a positive integer, got {self.num_channels!r}")
        if self.type == "segmentation" and self.num_channels != 1:
            raise InfoError(f"a segmentation must have 1 channel, got {self.num_channels}")
        if not self.scales:
            raise InfoError("info must list at least one scale")
        keys = [s.key for s in self.scales]
        if len(set(keys)) != len(keys):
            raise InfoError(f"scale keys must be unique, got {keys}")
        for scale in self.scales:
            scale.chunk_decoding().check(np.dtype(self.data_type), self.num_channels, self.type)

    def scale(self, key: str) -> PrecomputedScale:
        for scale in self.scales:
            if scale.key == key:
                return scale
        raise KeyError(f"no scale {key!r}; scales are {[s.key for s in self.scales]}")

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PrecomputedInfo:
        if not isinstance(obj, Mapping):
            raise InfoError(f"info must be a JSON object, got {type(obj).__name__}")
        if obj.get("@type", VOLUME_TYPE) != VOLUME_TYPE:
            raise InfoError(f"info @type must be {VOLUME_TYPE!r}, got {obj.get('@type')!r}")
        for name in ("type", "data_type", "num_channels", "scales"):
            if name not in obj:
                raise InfoError(f"info is missing {name!r}")
        known = {"@type", "type", "data_type", "num_channels", "scales", "mesh", "skeletons"}
        return cls(
            type=obj["type"],
            data_type=str(obj["data_type"]).lower(),
            num_channels=obj["num_channels"],
            scales=tuple(PrecomputedScale.from_json(s) for s in obj["scales"]),
            mesh=obj.get("mesh"),
            skeletons=obj.get("skeletons"),
            extra={k: v for k, v in obj.items() if k not in known},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "@type": VOLUME_TYPE,
            "type": self.type,
            "data_type": self.data_type,
            "num_channels": self.num_channels,
            "scales": [s.to_json() for s in self.scales],
        }
        if self.mesh is not None:
            out["mesh"] = self.mesh
        if self.skeletons is not None:
            out["skeletons"] = self.skeletons
        out.update(self.extra)
        return out
