"""The codec entries of a sharded array's `zarr.json`: the inner chain and the index chain.

Inner chunks pass ``bytes`` (little endian) -> at most one compressor (`Compressor`: gzip, zstd
or blosc) -> optionally ``crc32c``; the shard index passes ``bytes`` (little endian) ->
``crc32c``. This module writes those lists and parses them back, refusing anything shardwright
cannot reproduce exactly; `Compressor.codec` is the byte codec that produces what an entry
describes. The rest of the document is `metadata`'s. Pure JSON: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.codecs import BYTE_CODECS, ByteCodec, byte_codec, byte_codec_class
from shardwright.errors import EncodingError, ZarrMetadataError

COMPRESSORS = tuple(BYTE_CODECS)


@dataclass(frozen=True)
class Compressor:
    """The compressor of the inner codec chain (a byte codec of `codecs.BYTE_CODECS`: gzip,
    zstd or blosc), with its settings; the codec itself checks them and writes its entry.

    `level` is the gzip/zstd level or the blosc clevel; `cname`, `shuffle` and `blocksize`
    apply to blosc only (the blosc typesize is always the array's item size).
    """

    name: str
    level: int
    cname: str | None = None
    shuffle: str | None = None
    blocksize: int = 0

    def __post_init__(self) -> None:
        if self.name not in COMPRESSORS:
            raise ZarrMetadataError(
                f"compressor must be one of {COMPRESSORS} or None, got {self.name!r}"
            )
        level = self.level
        if isinstance(level, bool) or not isinstance(level, int):
            raise ZarrMetadataError(f"{self.name} level must be an integer, got {level!r}")
        if self.name != "blosc" and (self.cname is not None or self.shuffle is not None
                                     or self.blocksize):  # fmt: skip
            raise ZarrMetadataError(f"cname/shuffle/blocksize apply to blosc only, not {self.name}")
        try:
            self.codec(1)
        except EncodingError as exc:
            raise ZarrMetadataError(str(exc)) from None

    @classmethod
    def of(cls, name: str, level: int | None = None) -> Compressor:
        """The compressor `name` at `level`, its codec's defaults for what is not given."""
        if name == "blosc":
            return cls.blosc(clevel=level)
        default: Any = byte_codec(name)
        return cls(name, default.level if level is None else level)

    @classmethod
    def gzip(cls, level: int | None = None) -> Compressor:
        return cls.of("gzip", level)

    @classmethod
    def zstd(cls, level: int | None = None) -> Compressor:
        return cls.of("zstd", level)

    @classmethod
    def blosc(cls, cname: str | None = None, clevel: int | None = None,
              shuffle: str | None = None, blocksize: int = 0) -> Compressor:  # fmt: skip
        default: Any = byte_codec("blosc")
        return cls("blosc", default.clevel if clevel is None else clevel,
                   cname or default.cname, shuffle or default.shuffle, blocksize)  # fmt: skip

    @classmethod
    def of_codec(cls, codec: Any) -> Compressor:
        """The entry a byte codec writes (a blosc codec's typesize is the array's)."""
        if codec.name == "blosc":
            return cls("blosc", codec.clevel, codec.cname, codec.shuffle, codec.blocksize)
        return cls(codec.name, codec.level)

    def codec(self, itemsize: int) -> ByteCodec:
        """The byte codec that produces what this zarr.json entry describes."""
        if self.name == "blosc":
            codec = byte_codec("blosc", cname=self.cname, clevel=self.level, shuffle=self.shuffle,
                               typesize=itemsize, blocksize=self.blocksize)  # fmt: skip
        else:
            codec = byte_codec(self.name, level=self.level)
        assert codec is not None
        return codec

    def to_json(self, itemsize: int) -> dict[str, Any]:
        return self.codec(itemsize).zarr_json()


def inner_codecs_json(
    compressor: Compressor | None, checksum: bool, itemsize: int
) -> list[dict[str, Any]]:
    """The inner chunk codec chain: bytes (little endian), compressor?, crc32c?."""
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if compressor is not None:
        codecs.append(compressor.to_json(itemsize))
    if checksum:
        codecs.append({"name": "crc32c"})
    return codecs


def index_codecs_json() -> list[dict[str, Any]]:
    """The shard index codec chain: bytes (little endian), crc32c."""
    return [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]


def parse_named(value: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    """(name, configuration) of a `{"name", "configuration"}` object or a bare name string."""
    if isinstance(value, str):
        return value, {}
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise ZarrMetadataError(f"{where} must be an object with a 'name', got {value!r}")
    check_keys(value, {"name", "configuration"}, where)
    config = value.get("configuration", {})
    if not isinstance(config, Mapping):
        raise ZarrMetadataError(f"{where}.configuration must be an object, got {config!r}")
    return value["name"], config


def check_keys(config: Mapping[str, Any], allowed: set[str], where: str) -> None:
    """Refuse members of `config` outside `allowed`, naming them and `where` they are."""
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise ZarrMetadataError(f"{where} has unsupported member(s): {', '.join(unknown)}")


def _check_bytes_codec(config: Mapping[str, Any], where: str, itemsize: int) -> None:
    check_keys(config, {"endian"}, where)
    endian = config.get("endian")
    if endian is None and itemsize > 1:
        raise ZarrMetadataError(f"{where}: bytes codec needs 'endian' for a multi-byte data type")
    if endian not in (None, "little"):
        raise ZarrMetadataError(f"{where}: bytes endian must be 'little', got {endian!r}")


def parse_inner_codecs(codecs: Any, dtype: np.dtype[Any]) -> tuple[Compressor | None, bool]:
    """The inner chain must be bytes, then at most one compressor, then optionally crc32c."""
    where = "codecs[0].configuration.codecs"
    if not isinstance(codecs, list) or not codecs:
        raise ZarrMetadataError(f"{where} must be a non-empty list, got {codecs!r}")
    parsed = [parse_named(c, f"{where}[{i}]") for i, c in enumerate(codecs)]
    name, config = parsed[0]
    if name != "bytes":
        raise ZarrMetadataError(f"{where}[0] must be the 'bytes' codec, got {name!r}")
    _check_bytes_codec(config, f"{where}[0]", dtype.itemsize)
    compressor: Compressor | None = None
    checksum = False
    for i, (name, config) in enumerate(parsed[1:], start=1):
        at = f"{where}[{i}]"
        if name == "crc32c" and i == len(parsed) - 1:
            check_keys(config, set(), at)
            checksum = True
        elif name in COMPRESSORS and compressor is None and i == 1:
            compressor = _parse_compressor(name, config, at, dtype.itemsize)
        elif name in COMPRESSORS or name == "crc32c":
            raise ZarrMetadataError(
                f"{at}: codec {name!r} is out of place; the supported inner chain is "
                f"bytes, [{'|'.join(COMPRESSORS)}], [crc32c]"
            )
        else:
            raise ZarrMetadataError(f"{at}: unsupported codec {name!r}")
    return compressor, checksum


def _parse_compressor(
    name: str, config: Mapping[str, Any], where: str, itemsize: int
) -> Compressor:
    """The compressor entry `name` as its codec reads it back."""
    try:
        return Compressor.of_codec(byte_codec_class(name).from_zarr_json(config, itemsize))
    except (EncodingError, ZarrMetadataError) as exc:
        raise ZarrMetadataError(f"{where}: {exc}") from None


def parse_index_codecs(codecs: Any) -> None:
    """The index chain must be bytes (little endian), then crc32c."""
    where = "codecs[0].configuration.index_codecs"
    if not isinstance(codecs, list):
        raise ZarrMetadataError(f"{where} must be a list, got {codecs!r}")
    parsed = [parse_named(c, f"{where}[{i}]") for i, c in enumerate(codecs)]
    if [name for name, _ in parsed] != ["bytes", "crc32c"]:
        raise ZarrMetadataError(
            f"{where} must be [bytes (little endian), crc32c], got {[n for n, _ in parsed]}"
        )
    _check_bytes_codec(parsed[0][1], f"{where}[0]", 8)
    check_keys(parsed[1][1], set(), f"{where}[1]")
