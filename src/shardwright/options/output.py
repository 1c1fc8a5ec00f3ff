"""The output format's options: which format, its chunk encoding and compression, its sharding
(precomputed's bits and hash, zarr3's shard shape and index) and its layout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shardwright.codecs import BYTE_CODECS, CHUNK_ENCODINGS
from shardwright.common.flags import XYZ, cli, format_size, parse_size, parse_xyz
from shardwright.common.option_checks import check_choice, whole
from shardwright.common.vocabulary import (
    ADDED_ONLY_FORMATS,
    IndexLocation,
    OutputFormat,
    ShardHash,
    names,
)
from shardwright.errors import NAMED, OptionError
from shardwright.options.volume import GiB

# What a conversion writes (Zarr v2 is written only as levels added to an OME-Zarr 0.4 group).
FORMATS = tuple(name for name in names(OutputFormat) if name not in ADDED_ONLY_FORMATS)
ENCODINGS = tuple(CHUNK_ENCODINGS)  # the codecs' registry names them
COMPRESSIONS = ("none", *BYTE_CODECS)
HASHES = names(ShardHash)
INDEX_LOCATIONS = names(IndexLocation)
ZARR_LAYOUTS = ("ome", "array")

DEFAULT_BLOCK_SIZE = (8, 8, 8)
DEFAULT_JPEG_QUALITY = 85
DEFAULT_INDEX_LOCATION = "end"
DEFAULT_ZARR_LAYOUT = "ome"
MAX_MINISHARD_BITS = 20  # a 16 MiB shard index, which readers fetch whole


_AUTOMATIC_SHARDING = "precomputed sharding (default: from --target-shard-bytes)"


@dataclass(frozen=True)
class OutputOptions:
    """The output format: its encoding, compression, sharding and layout."""

    TITLE: ClassVar[str] = "the output format"

    format: str = field(
        default="precomputed", metadata=cli("--format", "output format", choices=FORMATS)
    )
    encoding: str | None = field(
        default=None,
        metadata=cli(
            "--encoding",
            "precomputed chunk encoding (default: compressed_segmentation for uint32/uint64 "
            "segmentations, raw otherwise)",
            choices=ENCODINGS,
        ),
    )
    compression: str | None = field(
        default=None,
        metadata=cli(
            "--compression",
            "precomputed data_encoding (none|gzip) or zarr3 inner codec; "
            "default gzip (none for jpeg/png)",
            choices=COMPRESSIONS,
        ),
    )
    compression_level: int | None = field(
        default=None,
        metadata=cli(
            "--compression-level",
            "gzip 0-9, zstd 1-22, blosc 0-9 (default: gzip 6, zstd 3, blosc 5)",
            parse=int,
        ),
    )
    scale_key: str | None = field(
        default=None,
        metadata=cli("--scale-key", "precomputed scale key (default from the resolution)"),
    )
    compressed_segmentation_block_size: tuple[int, int, int] | None = field(
        default=None,  # resolved(): DEFAULT_BLOCK_SIZE
        metadata=cli(
            "--block-size",
            "compressed_segmentation block size (default 8,8,8)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    jpeg_quality: int | None = field(
        default=None,  # resolved(): DEFAULT_JPEG_QUALITY
        metadata=cli("--jpeg-quality", "1-100 (default 85)", parse=int),
    )
    target_shard_bytes: int = field(
        default=1 * GiB,
        metadata=cli(
            "--target-shard-bytes",
            "automatic sharding aims at shards of about this size",
            parse=parse_size,
            metavar="SIZE",
        ),
    )
    min_shards: int = field(
        default=16,
        metadata=cli(
            "--min-shards",
            "automatic sharding keeps at least this many shards, for parallelism",
            parse=int,
        ),
    )
    preshift_bits: int | None = field(
        default=None, metadata=cli("--preshift-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    minishard_bits: int | None = field(
        default=None, metadata=cli("--minishard-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    shard_bits: int | None = field(
        default=None, metadata=cli("--shard-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    hash: str | None = field(
        default=None,
        metadata=cli("--hash", "precomputed sharding hash (default identity)", choices=HASHES),
    )
    shard_shape: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli(
            "--shard-shape",
            "zarr3 shard shape (default: from --target-shard-bytes)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    index_location: str | None = field(
        default=None,  # resolved(): DEFAULT_INDEX_LOCATION
        metadata=cli(
            "--index-location",
            "zarr3 shard index position (default end; start suits stores without suffix "
            "range reads)",
            choices=INDEX_LOCATIONS,
        ),
    )
    zarr_layout: str | None = field(
        default=None,  # resolved(): DEFAULT_ZARR_LAYOUT
        metadata=cli(
            "--zarr-layout",
            "zarr3 layout (default ome: an OME-Zarr 0.5 group, level arrays 0/, 1/, ... with "
            "voxel size, units and, for segmentations, image-label metadata; array: one bare "
            "array at DEST, one level)",
            choices=ZARR_LAYOUTS,
        ),
    )

    def check_output(self) -> None:
        """The format's options, each one of its choices or within its range (what a chosen
        format refuses of another's is the planner's: `planning/formats.py`)."""
        check_choice(self, "format", FORMATS, "an output format")
        check_choice(self, "compression", COMPRESSIONS, "a compression", optional=True)
        check_choice(self, "index_location", INDEX_LOCATIONS, "an index location", optional=True)
        check_choice(self, "zarr_layout", ZARR_LAYOUTS, "a zarr layout", optional=True)
        if not whole(self.target_shard_bytes, 1):
            raise OptionError("{target_shard_bytes} must be bytes or a size such as 512M, at "
                              f"least {format_size(1)}",
                              target_shard_bytes=self.target_shard_bytes)  # fmt: skip
        for name, most in (("preshift_bits", 64), ("minishard_bits", MAX_MINISHARD_BITS),
                           ("shard_bits", 64)):  # fmt: skip
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not 0 <= value <= most):
                raise OptionError(
                    f"{{{name}}} must be in 0..{most}, got {value}"
                    + (" (each shard's index holds 16 bytes per minishard: 2^20 of them "
                       "make 16 MiB)" if name == "minishard_bits" else ""),
                    **{name: NAMED},
                )  # fmt: skip
