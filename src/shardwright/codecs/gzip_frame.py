"""RFC 1952 gzip members around raw DEFLATE streams, for a whole batch at once.

A GPU compressor (nvCOMP's Deflate in RAW bitstream mode) returns bare DEFLATE streams and
nvCOMP's CRC32 their checksums; precomputed's `gzip` data encoding needs gzip members. This
adds each member's 10-byte header and 8-byte trailer (CRC-32, input size mod 2^32, both
little-endian) with one vectorized gather over the array namespace, no loop over chunks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwright.common.arrays import Array, exclusive_scan, gather_segments

# ID1 ID2, CM=8 (deflate), FLG=0, MTIME=0, XFL=0, OS=255 (unknown): a reproducible header.
GZIP_HEADER = bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])
HEADER_BYTES, TRAILER_BYTES = len(GZIP_HEADER), 8


def gzip_members(
    xp: Any,
    deflate: Array,
    offsets: np.ndarray,
    sizes: np.ndarray,
    crc32: np.ndarray,
    input_sizes: np.ndarray,
) -> tuple[Array, np.ndarray, np.ndarray]:
    """(buffer, offsets, sizes) of one gzip member per DEFLATE segment, in the same order."""
    count = len(sizes)
    trailers = np.empty((count, 2), dtype="<u4")
    trailers[:, 0] = np.asarray(crc32, dtype=np.uint64) & 0xFFFFFFFF
    trailers[:, 1] = np.asarray(input_sizes, dtype=np.uint64) & 0xFFFFFFFF
    # Source: [deflate | header | trailers]; members are header, stream, trailer per chunk.
    header_at = int(deflate.size)
    trailer_at = header_at + HEADER_BYTES
    source = xp.concatenate(
        [
            xp.asarray(deflate, dtype=xp.uint8),
            xp.asarray(np.frombuffer(GZIP_HEADER, dtype=np.uint8)),
            xp.asarray(trailers.view(np.uint8).reshape(-1)),
        ]
    )
    piece_offsets = np.stack(
        [
            np.full(count, header_at),
            np.asarray(offsets, dtype=np.int64),
            trailer_at + TRAILER_BYTES * np.arange(count),
        ],
        axis=1,
    ).reshape(-1)
    piece_sizes = np.stack(
        [
            np.full(count, HEADER_BYTES),
            np.asarray(sizes, dtype=np.int64),
            np.full(count, TRAILER_BYTES),
        ],
        axis=1,
    ).reshape(-1)
    members = gather_segments(xp, source, piece_offsets, piece_sizes, np.arange(3 * count))
    member_sizes = np.asarray(sizes, dtype=np.int64) + HEADER_BYTES + TRAILER_BYTES
    return members, np.asarray(exclusive_scan(np, member_sizes)), member_sizes
