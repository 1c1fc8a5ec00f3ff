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

from shardwright.codecs import ByteCodec, byte_codec
from shardwright.codecs.base import blosc_problem
from shardwright.errors import ZarrMetadataError

COMPRESSORS = ("gzip", "zstd", "blosc")


@dataclass(frozen=True)
class Compressor:
    """The compressor of the inner codec chain: gzip, zstd or blosc, with its settings.

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
        low, high = {"gzip": (0, 9), "zstd": (-131072, 22), "blosc": (0, 9)}[self.name]
        if not low <= level <= high:
            raise ZarrMetadataError(f"{self.name} level must be in [{low}, {high}], got {level}")
        if self.name == "blosc":
            problem = blosc_problem(self.cname, level, self.shuffle, self.blocksize)
            if problem is not None:
                raise ZarrMetadataError(problem)
        elif self.cname is not None or self.shuffle is not None or self.blocksize:
            raise ZarrMetadataError(f"cname/shuffle/blocksize apply to blosc only, not {self.name}")

    @classmethod
    def gzip(cls, level: int = 6) -> Compressor:
        return cls("gzip", level)

    @classmethod
    def zstd(cls, level: int = 3) -> Compressor:
        return cls("zstd", level)

    @classmethod
    def blosc(
        cls, cname: str = "zstd", clevel: int = 5, shuffle: str = "shuffle", blocksize: int = 0
    ) -> Compressor:
        return cls("blosc", clevel, cname, shuffle, blocksize)

    def codec(self, itemsize: int) -> ByteCodec:
        """The byte codec that produces what this zarr.json entry describes."""
        if self.name == "blosc":
            codec = byte_codec(
                "blosc",
                cname=self.cname or "zstd",
                clevel=self.level,
                shuffle=self.shuffle or "shuffle",
                typesize=itemsize,
                blocksize=self.blocksize,
            )
        else:
            codec = byte_codec(self.name, level=self.level)
        assert codec is not None
        return codec

    def to_json(self, itemsize: int) -> dict[str, Any]:
        if self.name == "gzip":
            return {"name": "gzip", "configuration": {"level": self.level}}
        if self.name == "zstd":
            return {"name": "zstd", "configuration": {"level": self.level, "checksum": False}}
        return {
            "name": "blosc",
            "configuration": {
                "cname": self.cname,
                "clevel": self.level,
                "shuffle": self.shuffle,
                "typesize": itemsize,
                "blocksize": self.blocksize,
            },
        }


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
                "bytes, [gzip|zstd|blosc], [crc32c]"
            )
        else:
            raise ZarrMetadataError(f"{at}: unsupported codec {name!r}")
    return compressor, checksum


def _parse_compressor(
    name: str, config: Mapping[str, Any], where: str, itemsize: int
) -> Compressor:
    try:
        if name == "gzip":
            check_keys(config, {"level"}, where)
            return Compressor("gzip", config.get("level", 6))
        if name == "zstd":
            check_keys(config, {"level", "checksum"}, where)
            if config.get("checksum", False) is not False:
                raise ZarrMetadataError(f"{where}: zstd checksum=true is not supported")
            return Compressor("zstd", config.get("level", 0))
        check_keys(config, {"cname", "clevel", "shuffle", "typesize", "blocksize"}, where)
        typesize = config.get("typesize", itemsize)
        if typesize != itemsize:
            raise ZarrMetadataError(
                f"{where}: blosc typesize {typesize!r} differs from the item size {itemsize}"
            )
        return Compressor(
            "blosc",
            config.get("clevel", 5),
            config.get("cname"),
            config.get("shuffle"),
            config.get("blocksize", 0),
        )
    except ZarrMetadataError as exc:
        if str(exc).startswith(where):
            raise
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
