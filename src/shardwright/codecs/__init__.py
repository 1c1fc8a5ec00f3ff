"""Chunk codecs behind two small interfaces (see base.py), one module per encoding.

Codec modules are imported when first used, so a job (or a CLI start) pays only for the C
libraries of the encodings it runs. The batched forms the GPU engine runs over an array
namespace live here too: `compressed_segmentation_batch` (a whole epoch of chunks in one pass),
`nvcomp` (gzip and zstd on the device; nvCOMP imported only when it runs) and `gzip_frame`
(gzip members around nvCOMP's raw DEFLATE streams).

Precomputed encodings are written (`chunk_encoding`: `CHUNK_ENCODINGS`) or, for those other tools
write and we only read from sources, decoded (`chunk_decoding`: `READ_ENCODINGS` too: compresso
and crackle, `label_streams`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from shardwright.common.lazy import lazy_attributes
from shardwright.errors import EncodingError

if TYPE_CHECKING:
    from shardwright.codecs.base import ByteCodec, ChunkEncoding
    from shardwright.codecs.blosc import BloscCodec
    from shardwright.codecs.compressed_segmentation import CompressedSegmentationEncoding
    from shardwright.codecs.gzip import GzipCodec
    from shardwright.codecs.jpeg import JpegEncoding
    from shardwright.codecs.label_streams import CompressoEncoding, CrackleEncoding
    from shardwright.codecs.png import PngEncoding
    from shardwright.codecs.raw import RawEncoding
    from shardwright.codecs.zstd import ZstdCodec

# The codecs, one line each: name -> (its module under shardwright.codecs, its class). The
# options' choices, --help and the zarr.json parser take their names from here.
BYTE_CODECS: dict[str, tuple[str, str]] = {
    "gzip": ("gzip", "GzipCodec"),
    "zstd": ("zstd", "ZstdCodec"),
    "blosc": ("blosc", "BloscCodec"),
}
CHUNK_ENCODINGS: dict[str, tuple[str, str]] = {
    "raw": ("raw", "RawEncoding"),
    "compressed_segmentation": ("compressed_segmentation", "CompressedSegmentationEncoding"),
    "jpeg": ("jpeg", "JpegEncoding"),
    "png": ("png", "PngEncoding"),
}
# read from precomputed sources only: no output of ours is written in them
READ_ENCODINGS: dict[str, tuple[str, str]] = {
    "compresso": ("label_streams", "CompressoEncoding"),
    "crackle": ("label_streams", "CrackleEncoding"),
}
_CLASSES = {
    "ByteCodec": "base",  # the interfaces: base imports NumPy, which a CLI start need not
    "ChunkEncoding": "base",
    **{
        cls: module
        for table in (BYTE_CODECS, CHUNK_ENCODINGS, READ_ENCODINGS)
        for module, cls in table.values()
    },
}


__getattr__ = lazy_attributes(__name__, _CLASSES)


def _build(kind: str, name: str, cls: type, options: dict[str, Any]) -> Any:
    """cls(**options), refusing unknown options by name instead of with a bare TypeError."""
    known = [f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = f"takes {', '.join(known)}" if known else "takes no options"
        raise EncodingError(f"{kind} {name!r} {takes}; got {', '.join(unknown)}")
    return cls(**options)


def byte_codec_class(name: str) -> Any:
    """The class of the byte codec called `name` (its `from_zarr_json` reads an entry)."""
    if name not in BYTE_CODECS:
        raise EncodingError(f"unknown compression {name!r}; choose none, {', '.join(BYTE_CODECS)}")
    return __getattr__(BYTE_CODECS[name][1])


def byte_codec(name: str | None, **options: Any) -> ByteCodec | None:
    """The bytes-to-bytes codec called `name` ("none"/"raw"/None: no codec); options given
    as None take the codec's default."""
    options = {k: v for k, v in options.items() if v is not None}
    if name in (None, "none", "raw"):
        return None
    codec: ByteCodec = _build("compression", name, byte_codec_class(name), options)
    return codec


def chunk_encoding(name: str, **options: Any) -> ChunkEncoding:
    """The precomputed chunk encoding called `name` (block_size for compressed_segmentation,
    quality for jpeg, level for png): one that can be written."""
    if name not in CHUNK_ENCODINGS:
        said = f"unknown precomputed encoding {name!r}"
        if name in READ_ENCODINGS:
            said = f"precomputed encoding {name!r} is read from sources, never written"
        raise EncodingError(f"{said}; choose {', '.join(CHUNK_ENCODINGS)}")
    cls = __getattr__(CHUNK_ENCODINGS[name][1])
    encoding: ChunkEncoding = _build("encoding", name, cls, options)
    return encoding


def chunk_decoding(name: str, **options: Any) -> ChunkEncoding:
    """The precomputed encoding called `name` as a source's chunks are read: any that
    `chunk_encoding` writes, and those read only (`READ_ENCODINGS`), whose `encode` refuses."""
    if name in CHUNK_ENCODINGS:
        return chunk_encoding(name, **options)
    if name not in READ_ENCODINGS:
        read = ", ".join([*CHUNK_ENCODINGS, *READ_ENCODINGS])
        raise EncodingError(f"unknown precomputed encoding {name!r}; shardwright reads {read}")
    cls = __getattr__(READ_ENCODINGS[name][1])
    encoding: ChunkEncoding = _build("encoding", name, cls, options)
    return encoding


__all__ = [
    "BYTE_CODECS",
    "CHUNK_ENCODINGS",
    "BloscCodec",
    "ByteCodec",
    "ChunkEncoding",
    "CompressedSegmentationEncoding",
    "CompressoEncoding",
    "CrackleEncoding",
    "EncodingError",
    "GzipCodec",
    "JpegEncoding",
    "PngEncoding",
    "READ_ENCODINGS",
    "RawEncoding",
    "ZstdCodec",
    "byte_codec",
    "byte_codec_class",
    "chunk_decoding",
    "chunk_encoding",
]
