"""Zstandard frames (content size recorded, no checksum), as zarr's `zstd` codec stores them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import zstandard

from shardwright.codecs.base import Buffer


@dataclass(frozen=True)
class ZstdCodec:
    level: int = 3
    name: str = "zstd"
    _local: threading.local = field(default_factory=threading.local, compare=False, repr=False)

    def _compressor(self) -> zstandard.ZstdCompressor:
        # Compressor objects are not thread-safe; keep one per thread.
        if not hasattr(self._local, "c"):
            self._local.c = zstandard.ZstdCompressor(level=self.level, write_checksum=False)
        return self._local.c

    def compress(self, data: Buffer) -> bytes:
        return self._compressor().compress(data)

    def decompress(self, data: Buffer) -> bytes:
        return zstandard.ZstdDecompressor().decompress(bytes(data))

    def zarr_json(self) -> dict[str, object]:
        return {"name": "zstd", "configuration": {"level": self.level, "checksum": False}}

    def __getstate__(self) -> dict[str, object]:
        return {"level": self.level}

    def __setstate__(self, state: dict[str, object]) -> None:
        object.__setattr__(self, "level", state["level"])
        object.__setattr__(self, "name", "zstd")
        object.__setattr__(self, "_local", threading.local())
