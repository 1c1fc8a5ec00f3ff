"""Blosc1 frames through numcodecs, as zarr's `blosc` codec and TensorStore read them."""

from __future__ import annotations

from dataclasses import dataclass

from numcodecs import Blosc

from shardwright.codecs.base import Buffer

SHUFFLES = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
CNAMES = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")


@dataclass(frozen=True)
class BloscCodec:
    cname: str = "zstd"
    clevel: int = 5
    shuffle: str = "shuffle"
    typesize: int = 1
    blocksize: int = 0
    name: str = "blosc"

    def __post_init__(self) -> None:
        if self.cname not in CNAMES:
            raise ValueError(f"blosc cname must be one of {CNAMES}, got {self.cname!r}")
        if self.shuffle not in SHUFFLES:
            raise ValueError(
                f"blosc shuffle must be one of {tuple(SHUFFLES)}, got {self.shuffle!r}"
            )

    def _codec(self) -> Blosc:
        return Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize,
        )

    def compress(self, data: Buffer) -> bytes:
        return bytes(self._codec().encode(data))

    def decompress(self, data: Buffer) -> bytes:
        return bytes(self._codec().decode(data))

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
