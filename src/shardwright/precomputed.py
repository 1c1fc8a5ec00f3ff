"""The Neuroglancer precomputed format (sharded v1 and `info`): bytes in, bytes out."""

from shardwright.formats.morton import (
    compressed_morton_code,
    decode_compressed_morton_code,
    grid_bits,
    morton_bit_dims,
)
from shardwright.formats.murmurhash import murmurhash3_x86_128_low64
from shardwright.formats.precomputed_info import (
    InfoError,
    PrecomputedInfo,
    PrecomputedScale,
    check_scale_key,
)
from shardwright.formats.sharded_reader import ShardedReader
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.sharding import (
    ShardBuilder,
    ShardFormatError,
    ShardingSpec,
    ShardingSpecError,
    decode_minishard_index,
    encode_minishard_index,
    iter_minishard_indices,
    read_shard_index,
)

__all__ = [
    "InfoError",
    "PrecomputedInfo",
    "PrecomputedScale",
    "ShardBuilder",
    "ShardFile",
    "ShardFormatError",
    "ShardedReader",
    "ShardingSpec",
    "ShardingSpecError",
    "check_scale_key",
    "compressed_morton_code",
    "decode_compressed_morton_code",
    "decode_minishard_index",
    "encode_minishard_index",
    "grid_bits",
    "morton_bit_dims",
    "iter_minishard_indices",
    "murmurhash3_x86_128_low64",
    "read_shard_index",
]
