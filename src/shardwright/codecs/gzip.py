"""gzip through ISA-L (isal): standard RFC 1952 members, about ten times faster than zlib.

Levels are given zlib-style (0-9, what zarr's `gzip` codec records) and mapped onto ISA-L's
0-3: zlib 0-3 -> ISA-L 1, 4-7 -> 2, 8-9 -> 3. ISA-L level 0 is never used: its tiny hash table
expands image data (an EM-like 64^3 uint8 chunk comes out ~20% larger than it went in), while
level 1 costs about as little time. The header's mtime is 0, but ISA-L does not promise the
same bytes for the same input (docs/architecture.md, "where the code departs"): two identical
jobs wrote two of sixteen skeleton shards with a chunk compressed otherwise, decoding to the
same bytes. Objects are compared decoded across runs.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from isal import igzip

from shardwright.codecs.base import Buffer, only_members
from shardwright.errors import EncodingError


def isal_level(level: int) -> int:
    """The ISA-L level (1-3) for a zlib-style level (0-9)."""
    if isinstance(level, bool) or not isinstance(level, numbers.Integral) or not 0 <= level <= 9:
        raise EncodingError(f"gzip level must be an integer in 0..9, got {level!r}")
    return 1 if level <= 3 else 2 if level <= 7 else 3


@dataclass(frozen=True)
class GzipCodec:
    level: int = 6
    name: str = field(default="gzip", init=False, repr=False)

    def __post_init__(self) -> None:
        isal_level(self.level)

    def compress(self, data: Buffer) -> bytes:
        return igzip.compress(data, isal_level(self.level), mtime=0)

    def decompress(self, data: Buffer) -> bytes:
        return igzip.decompress(data)

    def zarr_json(self) -> dict[str, object]:
        return {"name": "gzip", "configuration": {"level": self.level}}

    @classmethod
    def from_zarr_json(cls, configuration: Mapping[str, Any], itemsize: int) -> GzipCodec:
        only_members(configuration, {"level"})
        return cls(configuration.get("level", cls.level))
