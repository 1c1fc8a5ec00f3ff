"""The `zarr.json` of a sharded Zarr v3 array: shape, data type, fill value, dimension names,
the chunk grids and key encoding, and the `sharding_indexed` codec that wraps the inner chunks.

`ZarrArrayMetadata` is the document as shardwright writes it, with the geometry derived from it
(shard grid, inner chunks per shard, shard keys); `from_json` reads what shardwright, zarr-python
3 or TensorStore write and refuses what shardwright cannot reproduce exactly. The codec lists
inside are `codecs`'s, the shard objects `sharding`'s. Pure JSON: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright.errors import ZarrMetadataError
from shardwright.formats.zarr3.codecs import (
    Compressor,
    check_keys,
    index_codecs_json,
    inner_codecs_json,
    parse_index_codecs,
    parse_inner_codecs,
    parse_named,
)
from shardwright.formats.zarr3.sharding import INDEX_LOCATIONS, index_nbytes

# The Zarr v3 core data types that have a NumPy type (all but the raw bits `r*`).
DATA_TYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
FillValue = int | float | bool | complex


def _positive_shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise ZarrMetadataError(f"{name} must be a list of integers, got {value!r}") from None
    for n in items:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ZarrMetadataError(f"{name} must be positive integers, got {list(items)}")
    if not items:
        raise ZarrMetadataError(f"{name} must have rank >= 1")
    return tuple(int(n) for n in items)


def _dtype_name(value: Any) -> str:
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name not in DATA_TYPES:
        raise ZarrMetadataError(f"data_type {value!r} is not supported; use one of {DATA_TYPES}")
    return name


def _fill_value(value: Any, dtype: np.dtype[Any]) -> FillValue:
    """`value` as a Python scalar of `dtype`'s kind, or an error if the dtype cannot hold it."""
    bad = ZarrMetadataError(f"fill_value {value!r} is not representable as {dtype.name}")
    if dtype.kind == "b":
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise bad
    if isinstance(value, bool | np.bool_):
        raise bad
    if dtype.kind in "iu":
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        if not isinstance(value, int | np.integer):
            raise bad
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise bad
        return int(value)
    if dtype.kind == "c":
        if not isinstance(value, int | float | complex | np.number):
            raise bad
        parts = _part_dtype(dtype)
        number = complex(value)
        return complex(_fill_value(number.real, parts), _fill_value(number.imag, parts))
    if not isinstance(value, int | float | np.integer | np.floating):
        raise bad
    number = float(value)
    if math.isfinite(number) and abs(number) > float(np.finfo(dtype).max):
        raise bad
    return number


def _part_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The float type of a complex type's real and imaginary parts."""
    return np.dtype(f"<f{dtype.itemsize // 2}")


def _fill_to_json(value: FillValue) -> Any:
    if isinstance(value, complex):  # [real, imaginary], each as a float fill value
        return [_fill_to_json(value.real), _fill_to_json(value.imag)]
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    return value


def _fill_from_json(value: Any, dtype: np.dtype[Any]) -> FillValue:
    if dtype.kind == "c":
        if not isinstance(value, list) or len(value) != 2:
            raise ZarrMetadataError(
                f"fill_value {value!r} is not a valid {dtype.name} fill value ([real, imaginary])"
            )
        parts = _part_dtype(dtype)
        real, imag = (_fill_from_json(v, parts) for v in value)
        return complex(real, imag)
    if dtype.kind == "f" and isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        if value.startswith("0x") and len(value) == 2 + 2 * dtype.itemsize:
            try:
                bits = int(value, 16)
            except ValueError:
                pass
            else:
                raw = bits.to_bytes(dtype.itemsize, "little")
                return float(np.frombuffer(raw, dtype=dtype.newbyteorder("<"))[0])
        raise ZarrMetadataError(f"fill_value {value!r} is not a valid {dtype.name} fill value")
    return _fill_value(value, dtype)


_TOP_LEVEL = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "storage_transformers",
}


@dataclass(frozen=True)
class ZarrArrayMetadata:
    """The `zarr.json` of a sharded Zarr v3 array as shardwright writes it.

    `shard_shape` is the outer chunk grid (one object per shard), `chunk_shape` the inner
    chunks inside each shard. Arrays are little endian, C order. A NaN fill value makes two
    otherwise equal instances compare unequal (NaN != NaN); compare `to_json()` instead.
    """

    shape: tuple[int, ...]
    data_type: str
    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    fill_value: FillValue = 0
    dimension_names: tuple[str | None, ...] | None = None
    compressor: Compressor | None = None
    checksum_inner: bool = False
    index_location: str = "end"
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "shape", _positive_shape(self.shape, "shape"))
        set_(self, "shard_shape", _positive_shape(self.shard_shape, "shard_shape"))
        set_(self, "chunk_shape", _positive_shape(self.chunk_shape, "chunk_shape"))
        rank = len(self.shape)
        for name in ("shard_shape", "chunk_shape"):
            if len(getattr(self, name)) != rank:
                raise ZarrMetadataError(
                    f"{name} {getattr(self, name)} has rank {len(getattr(self, name))}, "
                    f"shape {self.shape} has rank {rank}"
                )
        for d, (outer, inner) in enumerate(zip(self.shard_shape, self.chunk_shape, strict=True)):
            if outer % inner:
                raise ZarrMetadataError(
                    f"shard_shape {self.shard_shape} is not a multiple of chunk_shape "
                    f"{self.chunk_shape} in dimension {d} ({outer} % {inner} != 0)"
                )
        set_(self, "data_type", _dtype_name(self.data_type))
        set_(self, "fill_value", _fill_value(self.fill_value, self.dtype))
        if self.dimension_names is not None:
            names = tuple(self.dimension_names)
            if len(names) != rank:
                raise ZarrMetadataError(
                    f"dimension_names {list(names)} has {len(names)} entries, "
                    f"shape {self.shape} has rank {rank}"
                )
            if not all(n is None or isinstance(n, str) for n in names):
                raise ZarrMetadataError(
                    f"dimension_names must be strings or null, got {list(names)}"
                )
            set_(self, "dimension_names", names)
        if self.compressor is not None and not isinstance(self.compressor, Compressor):
            raise ZarrMetadataError(
                f"compressor must be a Compressor or None, got {self.compressor!r} "
                "(use Compressor.gzip(), Compressor.zstd() or Compressor.blosc())"
            )
        if not isinstance(self.checksum_inner, bool):
            raise ZarrMetadataError(f"checksum_inner must be a bool, got {self.checksum_inner!r}")
        if self.index_location not in INDEX_LOCATIONS:
            raise ZarrMetadataError(
                f"index_location must be 'start' or 'end', got {self.index_location!r}"
            )
        if not isinstance(self.attributes, dict):
            raise ZarrMetadataError(f"attributes must be a dict, got {type(self.attributes)}")

    # -- geometry -----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The little-endian numpy dtype of the stored elements."""
        return np.dtype(self.data_type).newbyteorder("<")

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape, strict=True))

    @property
    def shard_grid_shape(self) -> tuple[int, ...]:
        """Number of shards along each dimension (edge shards included)."""
        return tuple(-(-n // s) for n, s in zip(self.shape, self.shard_shape, strict=True))

    @property
    def chunk_grid_shape(self) -> tuple[int, ...]:
        """Number of inner chunks along each dimension over the whole array."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk_shape, strict=True))

    @property
    def index_nbytes(self) -> int:
        return index_nbytes(self.chunks_per_shard)

    def chunk_key(self, shard_coords: Sequence[int]) -> str:
        """The shard object's key relative to the array: default encoding, "/" separator."""
        return self.chunk_keys(np.asarray([shard_coords], dtype=np.int64))[0]

    def chunk_keys(self, shard_coords: np.ndarray) -> list[str]:
        """`chunk_key` of each row of an (N, ndim) array of shard coordinates, checked at
        once."""
        grid = self.shard_grid_shape
        coords = np.asarray(shard_coords)
        if (
            coords.ndim != 2
            or coords.shape[1] != len(grid)
            or (coords.size and ((coords < 0) | (coords >= np.asarray(grid))).any())
        ):
            bad = coords.tolist()[0] if coords.ndim == 2 and len(coords) == 1 else coords.shape
            raise ZarrMetadataError(
                f"shard coordinates {tuple(bad)} are out of range for the shard grid {grid}"
            )
        return ["c/" + "/".join(map(str, row)) for row in coords.tolist()]

    # -- JSON ---------------------------------------------------------------------------------
    def inner_codecs_json(self) -> list[dict[str, Any]]:
        """The inner chunk codec chain: bytes (little endian), compressor?, crc32c?."""
        return inner_codecs_json(self.compressor, self.checksum_inner, self.dtype.itemsize)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.shard_shape)},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": _fill_to_json(self.fill_value),
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(self.chunk_shape),
                        "codecs": self.inner_codecs_json(),
                        "index_codecs": index_codecs_json(),
                        "index_location": self.index_location,
                    },
                }
            ],
            "attributes": dict(self.attributes),
        }
        if self.dimension_names is not None:
            out["dimension_names"] = list(self.dimension_names)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ZarrArrayMetadata:
        """Parse a sharded array's zarr.json (as shardwright, zarr-python 3 or TensorStore write
        it); anything shardwright cannot reproduce exactly raises ZarrMetadataError."""
        if not isinstance(obj, Mapping):
            raise ZarrMetadataError(f"zarr.json must be a JSON object, got {type(obj).__name__}")
        for key, value in obj.items():
            if key not in _TOP_LEVEL and not (
                isinstance(value, Mapping) and value.get("must_understand") is False
            ):
                raise ZarrMetadataError(f"zarr.json has an unsupported member {key!r}")
        if obj.get("zarr_format") != 3:
            raise ZarrMetadataError(
                f"zarr.json zarr_format must be 3, got {obj.get('zarr_format')!r}"
            )
        if obj.get("node_type") != "array":
            raise ZarrMetadataError(
                f"zarr.json node_type must be 'array', got {obj.get('node_type')!r}"
            )
        for key in ("shape", "data_type", "chunk_grid", "fill_value", "codecs"):
            if key not in obj:
                raise ZarrMetadataError(f"zarr.json is missing {key!r}")
        if obj.get("storage_transformers"):
            raise ZarrMetadataError("zarr.json storage_transformers are not supported")

        if obj["data_type"] not in DATA_TYPES:
            raise ZarrMetadataError(
                f"data_type {obj['data_type']!r} is not supported; use one of {DATA_TYPES}"
            )
        dtype = np.dtype(obj["data_type"])

        grid = parse_named(obj["chunk_grid"], "chunk_grid")
        if grid[0] != "regular":
            raise ZarrMetadataError(f"chunk_grid must be 'regular', got {grid[0]!r}")
        check_keys(grid[1], {"chunk_shape"}, "chunk_grid.configuration")
        if "chunk_shape" not in grid[1]:
            raise ZarrMetadataError("chunk_grid.configuration is missing 'chunk_shape'")

        encoding = parse_named(obj.get("chunk_key_encoding", "default"), "chunk_key_encoding")
        if encoding[0] != "default":
            raise ZarrMetadataError(f"chunk_key_encoding must be 'default', got {encoding[0]!r}")
        check_keys(encoding[1], {"separator"}, "chunk_key_encoding.configuration")
        if encoding[1].get("separator", "/") != "/":
            raise ZarrMetadataError(
                f"chunk_key_encoding separator must be '/', got {encoding[1]['separator']!r}"
            )

        codecs = obj["codecs"]
        if not isinstance(codecs, list) or len(codecs) != 1:
            raise ZarrMetadataError(
                f"codecs must be exactly one 'sharding_indexed' codec, got {codecs!r}"
            )
        name, shard_cfg = parse_named(codecs[0], "codecs[0]")
        if name != "sharding_indexed":
            raise ZarrMetadataError(f"codecs[0] must be 'sharding_indexed', got {name!r}")
        where = "codecs[0].configuration"
        check_keys(shard_cfg, {"chunk_shape", "codecs", "index_codecs", "index_location"}, where)
        for key in ("chunk_shape", "codecs", "index_codecs"):
            if key not in shard_cfg:
                raise ZarrMetadataError(f"{where} is missing {key!r}")
        compressor, checksum_inner = parse_inner_codecs(shard_cfg["codecs"], dtype)
        parse_index_codecs(shard_cfg["index_codecs"])

        attributes = obj.get("attributes", {})
        if not isinstance(attributes, Mapping):
            raise ZarrMetadataError(f"zarr.json attributes must be an object, got {attributes!r}")
        names = obj.get("dimension_names")
        if names is not None and not isinstance(names, list):
            raise ZarrMetadataError(f"zarr.json dimension_names must be a list, got {names!r}")
        return cls(
            shape=obj["shape"],
            data_type=obj["data_type"],
            shard_shape=grid[1]["chunk_shape"],
            chunk_shape=shard_cfg["chunk_shape"],
            fill_value=_fill_from_json(obj["fill_value"], dtype),
            dimension_names=None if names is None else tuple(names),
            compressor=compressor,
            checksum_inner=checksum_inner,
            index_location=shard_cfg.get("index_location", "end"),
            attributes=dict(attributes),
        )
