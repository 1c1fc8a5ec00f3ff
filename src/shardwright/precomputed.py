"""The Neuroglancer precomputed format (sharded v1 and `info`): bytes in, bytes out."""

from shardwright.formats.precomputed.info import (
    InfoError,
    PrecomputedInfo,
    PrecomputedScale,
    check_scale_key,
)
from shardwright.formats.precomputed.morton import (
    compressed_morton_code,
    decode_compressed_morton_code,
    grid_bits,
    morton_bit_dims,
)
from shardwright.formats.precomputed.murmurhash import murmurhash3_x86_128_low64
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import (
    ShardBuilder,
    ShardFormatError,
    ShardingSpec,
    ShardingSpecError,
    decode_minishard_index,
    encode_minishard_index,
    iter_minishard_indices,
    read_shard_index,
)
from shardwright.formats.shardfile import ShardFile

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
