"""Public name of the Zarr v3 sharding format module (`sharding_indexed`, `zarr.json`)."""

from shardwright.errors import ShardFormatError, ZarrMetadataError
from shardwright.formats.zarr3_codecs import Compressor
from shardwright.formats.zarr3_metadata import ZarrArrayMetadata
from shardwright.formats.zarr3_sharding import (
    MISSING,
    ShardBuilder,
    ShardReader,
    append_crc32c,
    decode_shard,
    encode_index,
    encode_shard,
    index_nbytes,
    read_index,
    strip_crc32c,
)

__all__ = [
    "MISSING",
    "Compressor",
    "ShardBuilder",
    "ShardFormatError",
    "ShardReader",
    "ZarrArrayMetadata",
    "ZarrMetadataError",
    "append_crc32c",
    "decode_shard",
    "encode_index",
    "encode_shard",
    "index_nbytes",
    "read_index",
    "strip_crc32c",
]
