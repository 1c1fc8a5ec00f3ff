"""gzip through ISA-L (isal): standard RFC 1952 members, several times faster than zlib.

Levels are given zlib-style (0-9) and mapped onto ISA-L's 0-3: 0-3 -> 1, 4-7 -> 2, 8-9 -> 3.
ISA-L's own level 0 is skipped: on image data it expands the input. The header's mtime is 0,
so the same input always gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from isal import igzip

from shardwright.codecs.base import Buffer


def isal_level(level: int) -> int:
    if not 0 <= level <= 9:
        raise ValueError(f"gzip level must be in 0..9, got {level}")
    return 1 if level <= 3 else 2 if level <= 7 else 3


@dataclass(frozen=True)
class GzipCodec:
    level: int = 6
    name: str = "gzip"

    def __post_init__(self) -> None:
        isal_level(self.level)

    def compress(self, data: Buffer) -> bytes:
        return igzip.compress(data, isal_level(self.level), mtime=0)

    def decompress(self, data: Buffer) -> bytes:
        return igzip.decompress(data)

    def zarr_json(self) -> dict[str, object]:
        return {"name": "gzip", "configuration": {"level": self.level}}
