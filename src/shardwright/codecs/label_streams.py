"""Precomputed `compresso` and `crackle`: segmentation encodings CloudVolume writes, read here
(decoded by their own packages), never written.

Each chunk is one self-describing stream of a single-channel [x, y, z] label array: it starts
with its magic (`cpso`, `crkl`) and its header records the shape and the width of the
unsigned integer voxels (crackle also records the memory order). CloudVolume encodes the
chunk's channel 0 as it stands (`compresso.compress(chunk[:, :, :, 0])`, likewise for
crackle) and decodes it with `decompress(...).reshape(shape)`: the decoded array is indexed
[x, y, z] whatever its memory order. Both packages take uint8, uint16, uint32 and uint64 only.

The packages are imported on first use (the `seg-codecs` extra): a source encoded so is refused
by its `check`, before a job writes anything, naming the package that reads it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar

import numpy as np
from numpy.typing import DTypeLike

from shardwright.codecs.base import Buffer, check_channels, check_dtype
from shardwright.errors import CodecUnavailable, EncodingError
from shardwright.version import install_command

LABEL_DTYPES = ("uint8", "uint16", "uint32", "uint64")


class LabelStream:
    """What both encodings share; a subclass names the module that decodes its streams, the
    distribution that installs it and the stream's magic."""

    name: str
    module: ClassVar[str]
    distribution: ClassVar[str]
    magic: ClassVar[bytes]

    def package(self) -> ModuleType:
        """The decoding package, or CodecUnavailable naming it and how to install it."""
        try:
            return importlib.import_module(self.module)
        except ImportError:
            raise CodecUnavailable(
                f"reading {self.name} chunks needs the {self.distribution} package: "
                + install_command("seg-codecs")
            ) from None

    def _decompress(self, data: bytes) -> np.ndarray:
        return np.asarray(self.package().decompress(data))

    def encode(self, chunk: np.ndarray) -> bytes:
        raise EncodingError(
            f"{self.name} chunks are read from sources, never written; write raw, jpeg, png "
            "or compressed_segmentation"
        )

    def decode(
        self, data: Buffer, shape_xyzc: tuple[int, int, int, int], dtype: DTypeLike
    ) -> np.ndarray:
        """The [x, y, z, 1] labels of one stream; its header must give the chunk's shape and a
        data type no wider than `dtype` (unsigned: widened exactly)."""
        stream = bytes(data)
        if not stream.startswith(self.magic):
            raise EncodingError(f"not a {self.name} stream (it starts {stream[:4]!r})")
        if shape_xyzc[3] != 1:
            raise EncodingError(f"{self.name} encoding stores 1 channel, not {shape_xyzc[3]}")
        try:
            labels = self._decompress(stream)
        except CodecUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - the packages raise their own classes
            raise EncodingError(f"{self.name} stream does not decode ({exc})") from None
        want = np.dtype(dtype)
        if labels.shape != tuple(shape_xyzc[:3]):
            raise EncodingError(
                f"{self.name} stream holds a {labels.shape} array, expected {shape_xyzc[:3]}"
            )
        if labels.dtype != want:
            if labels.dtype.kind != "u" or want.kind != "u" or labels.itemsize > want.itemsize:
                raise EncodingError(f"{self.name} stream holds {labels.dtype}, expected {want}")
            labels = labels.astype(want)
        return labels[..., np.newaxis]

    def check(self, dtype: DTypeLike, num_channels: int, layer_type: str) -> None:
        check_dtype(self.name, dtype, LABEL_DTYPES)
        check_channels(self.name, num_channels, 1)
        self.package()


@dataclass(frozen=True)
class CompressoEncoding(LabelStream):
    name: str = field(default="compresso", init=False, repr=False)
    module: ClassVar[str] = "compresso"
    distribution: ClassVar[str] = "compresso"
    magic: ClassVar[bytes] = b"cpso"


@dataclass(frozen=True)
class CrackleEncoding(LabelStream):
    name: str = field(default="crackle", init=False, repr=False)
    module: ClassVar[str] = "crackle"
    distribution: ClassVar[str] = "crackle-codec"
    magic: ClassVar[bytes] = b"crkl"

    def _decompress(self, data: bytes) -> np.ndarray:
        # one thread: a job decodes many chunks at once, each on a thread of its own
        return np.asarray(self.package().decompress(data, parallel=1))
