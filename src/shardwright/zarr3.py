"""The Zarr v3 format (`sharding_indexed` shards and `zarr.json`): bytes in, bytes out."""

from shardwright.formats.zarr3 import (
    MISSING,
    Compressor,
    ShardBuilder,
    ShardFormatError,
    ShardReader,
    ZarrArrayMetadata,
    ZarrMetadataError,
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
