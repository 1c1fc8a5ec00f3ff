"""gzip members around raw DEFLATE streams (the GPU gzip path's framing) on numpy: every
member a standard gzip file that gzip, zlib and the precomputed codec decode."""

from __future__ import annotations

import gzip
import zlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.codecs import byte_codec
from shardwright.codecs.gzip_frame import gzip_members


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)  # a bare stream, as nvCOMP RAW gives
    return compressor.compress(data) + compressor.flush()


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=12))
def test_members_decode_to_the_inputs(chunks: list[bytes]) -> None:
    streams = [_raw_deflate(c) for c in chunks]
    sizes = np.array([len(s) for s in streams], dtype=np.int64)
    offsets = np.cumsum(sizes) - sizes
    buffer = np.frombuffer(b"".join(streams), dtype=np.uint8)
    crcs = np.array([zlib.crc32(c) for c in chunks], dtype=np.uint64)
    lengths = np.array([len(c) for c in chunks], dtype=np.uint64)
    members, member_offsets, member_sizes = gzip_members(np, buffer, offsets, sizes, crcs, lengths)
    assert int(member_sizes.sum()) == members.size
    codec = byte_codec("gzip")
    assert codec is not None
    for chunk, start, size in zip(chunks, member_offsets, member_sizes, strict=True):
        member = members[start : start + size].tobytes()
        assert gzip.decompress(member) == chunk  # checks the CRC and the size too
        assert codec.decompress(member) == chunk


def test_a_wrong_crc_is_caught_by_readers() -> None:
    data = b"precomputed chunk" * 50
    stream = np.frombuffer(_raw_deflate(data), dtype=np.uint8)
    members, _, _ = gzip_members(
        np, stream, np.array([0]), np.array([stream.size]), np.array([zlib.crc32(data) ^ 1]),
        np.array([len(data)]),
    )  # fmt: skip
    try:
        gzip.decompress(members.tobytes())
    except gzip.BadGzipFile:
        return
    raise AssertionError("a corrupted trailer was accepted")
