"""The Zarr v3 format (`sharding_indexed` shards and `zarr.json`): bytes in, bytes out."""

from shardwright.errors import ShardFormatError, ZarrMetadataError
from shardwright.formats.zarr3.codecs import Compressor
from shardwright.formats.zarr3.metadata import ZarrArrayMetadata
from shardwright.formats.zarr3.sharding import (
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
