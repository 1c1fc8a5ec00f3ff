"""Public name of the Zarr v3 sharding format module (`sharding_indexed`, `zarr.json`)."""

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
