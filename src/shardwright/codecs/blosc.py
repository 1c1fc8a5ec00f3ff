"""Blosc1 frames through numcodecs, as zarr's `blosc` codec and TensorStore read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from numcodecs import Blosc

from shardwright.codecs.base import Buffer, only_members
from shardwright.common.vocabulary import BloscName, BloscShuffle, names
from shardwright.errors import EncodingError

SHUFFLES = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}


def blosc_problem(cname: Any, clevel: Any, shuffle: Any, blocksize: Any) -> str | None:
    """What is wrong with these blosc settings (None: nothing)."""
    if cname not in names(BloscName):
        return f"blosc cname must be one of {names(BloscName)}, got {cname!r}"
    if shuffle not in names(BloscShuffle):
        return f"blosc shuffle must be one of {names(BloscShuffle)}, got {shuffle!r}"
    if isinstance(clevel, bool) or not isinstance(clevel, int) or not 0 <= clevel <= 9:
        return f"blosc clevel must be an integer in 0..9, got {clevel!r}"
    if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 0:
        return f"blosc blocksize must be 0 (automatic) or more, got {blocksize!r}"
    return None


@dataclass(frozen=True)
class BloscCodec:
    """`typesize` is the element size in bytes the shuffle works on (zarr: the dtype's itemsize)."""

    cname: str = "zstd"
    clevel: int = 5
    shuffle: str = "shuffle"
    typesize: int = 1
    blocksize: int = 0
    name: str = field(default="blosc", init=False, repr=False)
    _codec: Blosc = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problem = blosc_problem(self.cname, self.clevel, self.shuffle, self.blocksize)
        if problem is None and not 1 <= self.typesize <= 255:  # one byte in the blosc1 header
            problem = f"blosc typesize must be in 1..255, got {self.typesize!r}"
        if problem is not None:
            raise EncodingError(problem)
        codec = Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize,
        )
        object.__setattr__(self, "_codec", codec)

    def compress(self, data: Buffer) -> bytes:
        return bytes(self._codec.encode(data))

    def decompress(self, data: Buffer) -> bytes:
        return bytes(self._codec.decode(data))

    def zarr_json(self) -> dict[str, object]:
        return {
            "name": "blosc",
            "configuration": {
                "cname": self.cname,
                "clevel": self.clevel,
                "shuffle": self.shuffle,
                "typesize": self.typesize,
                "blocksize": self.blocksize,
            },
        }

    @classmethod
    def from_zarr_json(cls, configuration: Mapping[str, Any], itemsize: int) -> BloscCodec:
        """Its typesize must be the array's item size (the shuffle works on items)."""
        allowed = {"cname", "clevel", "shuffle", "typesize", "blocksize"}
        only_members(configuration, allowed)
        typesize = configuration.get("typesize", itemsize)
        if typesize != itemsize:
            raise EncodingError(
                f"blosc typesize {typesize!r} differs from the item size {itemsize}"
            )
        got: dict[str, Any] = {"clevel": cls.clevel, "blocksize": 0, **configuration}
        cname: Any = got.get("cname")  # none given: refused by name, as a wrong one is
        shuffle: Any = got.get("shuffle")
        return cls(cname, got["clevel"], shuffle, itemsize, got["blocksize"])
