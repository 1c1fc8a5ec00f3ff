"""compressed_segmentation for a batch of chunks at once, over an array namespace.

The GPU engine encodes every chunk of an epoch in one pass; this is that pass, written with
array operations only (no Python loop over chunks, blocks or voxels), so it runs on numpy here
and on CuPy on a GPU worker. Its output is the reference library's byte for byte, table
sharing included; on the CPU the C encoder (`codecs/_cseg.c`) is faster, and the tests hold
this one to the same bytes.

How the stream is built, per chunk and channel ("stream"), blocks in z, y, x order:
1. Pad the volume to whole blocks with each block's first voxel (always real), so padding adds
   no label; view it as rows of one block each, positions x-fastest.
2. Sort each row: the distinct labels (the block's table), their count n, and each voxel's
   rank (its packed index). Encoded bits: 0 for one label, else the least of 1, 2, 4, 8, 16,
   32 that holds n.
3. A table is written only by the first block of the stream that has it; later blocks point at
   it. Equal tables are found by hashing rows, then checked exactly.
4. Word sizes, an exclusive scan for offsets, then scatters of headers, packed indices (padding
   positions 0) and tables into one buffer of little-endian 32-bit words.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwright.common.arrays import Array
from shardwright.errors import EncodingError

_BITS = (0, 1, 2, 4, 8, 16, 32)
_TABLE_OFFSET_LIMIT = 0xFFFFFF


def encode_batch(
    xp: Any, chunks: Array, block_size: tuple[int, int, int]
) -> tuple[Array, np.ndarray]:
    """Encode `chunks` [N, x, y, z, c] (uint32 or uint64, all one shape) as N streams.

    Returns (uint8 buffer of the N encoded chunks back to back, host array of their sizes).
    """
    chunks = xp.asarray(chunks)
    if chunks.ndim != 5 or chunks.dtype not in (np.uint32, np.uint64):
        raise EncodingError("encode_batch takes [N, x, y, z, c] arrays of uint32 or uint64")
    count, sx, sy, sz, channels = (int(n) for n in chunks.shape)
    bx, by, bz = block_size
    grid = (-(-sx // bx), -(-sy // by), -(-sz // bz))
    blocks_per_stream = grid[0] * grid[1] * grid[2]
    volume = bx * by * bz
    words_per_label = chunks.dtype.itemsize // 4
    streams = count * channels

    rows, valid = _block_rows(xp, chunks, block_size, grid)  # (streams * G, V), (G, V)
    ordered, first_of_run, rank_sorted, index = _ranked(xp, rows, valid, streams)
    labels = rank_sorted[:, -1] + 1  # n per block

    bits = xp.zeros(labels.shape, dtype=xp.int64)
    for b in _BITS[:0:-1]:  # 32, 16, ..., 1: the least width that holds n labels
        bits = xp.where((labels > 1) & (labels <= 2**b), b, bits)
    packed_words = (bits * volume + 31) // 32

    # Tables: each row's distinct labels, padded with zeros; equal (n, labels) = equal table.
    tables = xp.zeros(rows.shape, dtype=rows.dtype)
    unique_rows, unique_cols = xp.nonzero(first_of_run)
    unique_values = ordered[unique_rows, unique_cols]
    unique_rank = rank_sorted[unique_rows, unique_cols]
    tables[unique_rows, unique_rank] = unique_values
    stream_of_row = xp.arange(rows.shape[0]) // blocks_per_stream
    first_row = _first_equal_row(xp, tables, labels, stream_of_row)
    writes_table = first_row == xp.arange(rows.shape[0])

    # Offsets in words from each stream's start: a header of 2 words per block first.
    row_words = packed_words + xp.where(writes_table, labels * words_per_label, 0)
    per_stream = row_words.reshape(streams, blocks_per_stream)
    in_stream = xp.cumsum(per_stream, axis=1) - per_stream
    values_offset = (2 * blocks_per_stream + in_stream).reshape(-1)
    own_table = values_offset + packed_words
    table_offset = own_table[first_row]
    if int(table_offset.max()) > _TABLE_OFFSET_LIMIT:
        raise EncodingError(
            f"compressed_segmentation cannot encode these {(sx, sy, sz)} chunks with block size "
            f"{block_size}: their label tables pass the format's 24-bit offset limit; use "
            f"smaller chunks"
        )
    stream_words = 2 * blocks_per_stream + per_stream.sum(axis=1)  # (streams,)
    chunk_stream_words = stream_words.reshape(count, channels)
    chunk_words = channels + chunk_stream_words.sum(axis=1)
    chunk_base = xp.cumsum(chunk_words) - chunk_words
    within_chunk = xp.cumsum(chunk_stream_words, axis=1) - chunk_stream_words + channels
    stream_base = (chunk_base[:, None] + within_chunk).reshape(-1)
    if int(within_chunk.max()) > 0xFFFFFFFF:
        raise EncodingError("compressed_segmentation chunk passes the format's 16 GiB limit")

    out = xp.zeros(int(chunk_words.sum()), dtype=xp.uint32)
    # Channel offsets of each chunk, from the chunk's start.
    out[(chunk_base[:, None] + xp.arange(channels)).reshape(-1)] = within_chunk.reshape(-1)
    # Block headers.
    header = stream_base[stream_of_row] + 2 * (xp.arange(rows.shape[0]) % blocks_per_stream)
    out[header] = (table_offset | (bits << 24)).astype(xp.uint32)
    out[header + 1] = values_offset.astype(xp.uint32)
    _scatter_packed(xp, out, index, bits, stream_base[stream_of_row] + values_offset, volume)
    # Tables, written by their first block only.
    keep = writes_table[unique_rows]
    rows_kept = unique_rows[keep]
    start = stream_base[stream_of_row[rows_kept]] + own_table[rows_kept]
    start = start + unique_rank[keep] * words_per_label
    values = unique_values[keep].astype(xp.uint64)
    for word in range(words_per_label):
        out[start + word] = ((values >> xp.uint64(32 * word)) & xp.uint64(0xFFFFFFFF)).astype(
            xp.uint32
        )
    if not np.little_endian:
        out = out.byteswap()
    return out.view(xp.uint8), _host(chunk_words).astype(np.int64) * 4


def _ranked(xp: Any, rows: Array, valid: Array, streams: int) -> tuple[Array, Array, Array, Array]:
    """Each block row's values sorted, where each run of equal values starts, each sorted
    value's rank among the row's distinct labels, and each voxel's rank (0 for a voxel
    outside the chunk, `valid` False)."""
    order = xp.argsort(rows, axis=1)
    ordered = xp.take_along_axis(rows, order, axis=1)
    first_of_run = xp.ones(ordered.shape, dtype=bool)
    first_of_run[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    rank_sorted = xp.cumsum(first_of_run, axis=1, dtype=xp.int64) - 1
    index = xp.empty_like(rank_sorted)
    index[xp.arange(rows.shape[0])[:, None], order] = rank_sorted
    index = xp.where(valid[None], index.reshape(streams, *valid.shape), 0).reshape(rows.shape)
    return ordered, first_of_run, rank_sorted, index


def _block_rows(
    xp: Any, chunks: Array, block_size: tuple[int, int, int], grid: tuple[int, int, int]
) -> tuple[Array, Array]:
    """Rows of one block each (streams * blocks, block voxels), padding filled with each
    block's first voxel; and which positions are real voxels (blocks, block voxels)."""
    count, sx, sy, sz, channels = chunks.shape
    bx, by, bz = block_size
    gx, gy, gz = grid
    # streams of [z, y, x] volumes, x fastest, as the block positions count
    volumes = chunks.transpose(0, 4, 3, 2, 1).reshape(count * channels, sz, sy, sx)
    origins = volumes[:, ::bz, ::by, ::bx]  # (streams, gz, gy, gx)
    padded = xp.broadcast_to(
        origins[:, :, None, :, None, :, None], (count * channels, gz, bz, gy, by, gx, bx)
    ).reshape(count * channels, gz * bz, gy * by, gx * bx)
    padded = padded.copy()
    padded[:, :sz, :sy, :sx] = volumes
    rows = padded.reshape(count * channels, gz, bz, gy, by, gx, bx).transpose(0, 1, 3, 5, 2, 4, 6)
    rows = rows.reshape(count * channels * gz * gy * gx, bz * by * bx)
    real = xp.zeros((gz * bz, gy * by, gx * bx), dtype=bool)
    real[:sz, :sy, :sx] = True
    valid = real.reshape(gz, bz, gy, by, gx, bx).transpose(0, 2, 4, 1, 3, 5)
    return xp.ascontiguousarray(rows), valid.reshape(gz * gy * gx, bz * by * bx)


def _first_equal_row(xp: Any, tables: Array, labels: Array, stream: Array) -> Array:
    """For each row, the first row of the same stream with an equal table (itself if none).

    Rows are grouped by (stream, n, hash of the table) with one sort; a hash collision (rows
    grouped together that differ) is caught by an exact comparison and resolved on the host.
    """
    n_rows = tables.shape[0]
    weights = _hash_weights(xp, tables.shape[1])
    hashed = (tables.astype(xp.uint64) * weights).sum(axis=1, dtype=xp.uint64)
    hashed = hashed ^ (hashed >> xp.uint64(29))
    keys = xp.stack([xp.arange(n_rows), hashed.view(xp.int64), labels, stream])  # all int64
    order = xp.lexsort(keys)  # by stream, n, hash, then row: a group's first row leads it
    key_sorted = keys[1:, order]
    starts = xp.ones(n_rows, dtype=bool)
    starts[1:] = xp.any(key_sorted[:, 1:] != key_sorted[:, :-1], axis=0)
    group = xp.cumsum(starts) - 1
    first = xp.empty(n_rows, dtype=xp.int64)
    first[order] = order[xp.nonzero(starts)[0][group]]
    if bool(xp.all(tables == tables[first])):
        return first
    return xp.asarray(_first_equal_row_exact(_host(tables), _host(stream)))


def _first_equal_row_exact(tables: np.ndarray, stream: np.ndarray) -> np.ndarray:
    keyed = np.concatenate([stream[:, None].astype(tables.dtype), tables], axis=1)
    _, first_index, inverse = np.unique(keyed, axis=0, return_index=True, return_inverse=True)
    return np.asarray(first_index[inverse.reshape(-1)], dtype=np.int64)


def _hash_weights(xp: Any, columns: int) -> Array:
    """Odd 64-bit multipliers, one per table position (a fixed seed: same on CPU and GPU)."""
    rng = np.random.default_rng(0x5EED)
    weights = rng.integers(0, 2**63, columns, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    return xp.asarray(weights)


def _scatter_packed(
    xp: Any, out: Array, index: Array, bits: Array, start: Array, volume: int
) -> None:
    """Pack each block's indices `bits` wide into 32-bit words at out[start:]: per width, all
    blocks of that width at once (each word holds 32 / bits consecutive positions)."""
    for b in _BITS[1:]:
        rows = xp.nonzero(bits == b)[0]
        if rows.size == 0:
            continue
        per_word = 32 // b
        words = (b * volume + 31) // 32
        fields = xp.zeros((rows.size, words * per_word), dtype=xp.uint64)
        fields[:, :volume] = index[rows].astype(xp.uint64)
        shifts = (xp.arange(per_word, dtype=xp.uint64) * xp.uint64(b))[None, None, :]
        packed = (fields.reshape(rows.size, words, per_word) << shifts).sum(axis=2, dtype=xp.uint64)
        positions = start[rows][:, None] + xp.arange(words)
        out[positions] = packed.astype(xp.uint32)


def _host(array: Array) -> np.ndarray:
    return np.asarray(array.get() if hasattr(array, "get") else array)
