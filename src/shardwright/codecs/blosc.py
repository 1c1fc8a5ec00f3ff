"""Blosc1 frames through numcodecs, as zarr's `blosc` codec and TensorStore read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from numcodecs import Blosc

from shardwright.codecs.base import Buffer, blosc_problem
from shardwright.errors import EncodingError

SHUFFLES = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}


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
