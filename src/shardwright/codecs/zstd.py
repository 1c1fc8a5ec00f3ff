"""Zstandard frames (content size recorded, no checksum), as zarr's `zstd` codec stores them."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import zstandard

from shardwright.codecs.base import Buffer, only_members
from shardwright.errors import EncodingError


@dataclass(frozen=True)
class ZstdCodec:
    level: int = 3
    name: str = field(default="zstd", init=False, repr=False)
    _local: threading.local = field(
        default_factory=threading.local, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        level = self.level
        if (
            isinstance(level, bool)
            or not isinstance(level, int)
            or not (-(1 << 17) <= level <= zstandard.MAX_COMPRESSION_LEVEL)
        ):
            raise EncodingError(
                f"zstd level must be in -131072..{zstandard.MAX_COMPRESSION_LEVEL}, "
                f"got {self.level!r}"
            )

    def _contexts(self) -> Any:
        # Compressor objects are not thread-safe and cost a context allocation: one per thread.
        local = self._local
        if not hasattr(local, "c"):
            local.c = zstandard.ZstdCompressor(level=self.level, write_checksum=False)
            local.d = zstandard.ZstdDecompressor()
        return local

    def compress(self, data: Buffer) -> bytes:
        return self._contexts().c.compress(data)

    def decompress(self, data: Buffer) -> bytes:
        decompressor = self._contexts().d
        try:
            return decompressor.decompress(data)
        except zstandard.ZstdError:
            # Frames written in streaming mode carry no content size; decode those as a stream.
            return decompressor.decompressobj().decompress(data)

    def zarr_json(self) -> dict[str, object]:
        return {"name": "zstd", "configuration": {"level": self.level, "checksum": False}}

    @classmethod
    def from_zarr_json(cls, configuration: Mapping[str, Any], itemsize: int) -> ZstdCodec:
        only_members(configuration, {"level", "checksum"})
        if configuration.get("checksum", False) is not False:
            raise EncodingError("zstd checksum=true is not supported")
        return cls(configuration.get("level", 0))  # zarr's default level

    def __getstate__(self) -> dict[str, object]:
        return {"level": self.level}

    def __setstate__(self, state: dict[str, object]) -> None:
        object.__setattr__(self, "level", state["level"])
        object.__setattr__(self, "name", "zstd")
        object.__setattr__(self, "_local", threading.local())
