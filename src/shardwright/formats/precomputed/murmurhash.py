"""Vectorized MurmurHash3_x86_128 of uint64 ids, as the precomputed sharded format hashes them.

The sharded format hashes the 8-byte little-endian id (after the preshift) and keeps the low
8 bytes of the 128-bit digest as a little-endian uint64, i.e. ``h1 | h2 << 32``. For an 8-byte
key with seed 0 the x86_128 algorithm reduces to a short, fixed sequence of 32-bit operations,
which numpy runs over millions of ids at once (the `mmh3` package hashes one key per call).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_C1 = np.uint32(0x239B961B)
_C2 = np.uint32(0xAB0E9789)
_C3 = np.uint32(0x38B34AE5)
_KEY_LENGTH = np.uint32(8)


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def murmurhash3_x86_128_low64(ids: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Low 64 bits of MurmurHash3_x86_128 (seed 0) of each id's 8-byte little-endian encoding."""
    keys = np.ascontiguousarray(ids, dtype=np.uint64)
    words = keys.view(np.uint32).reshape(-1, 2)
    if not np.little_endian:  # pragma: no cover - only big-endian hosts
        words = words[:, ::-1]
    with np.errstate(over="ignore"):
        # Tail of length 8: k1 is bytes 0-3, k2 bytes 4-7; no full 16-byte blocks.
        k2 = _rotl32(words[:, 1] * _C2, 16) * _C3
        k1 = _rotl32(words[:, 0] * _C1, 15) * _C2
        h1 = k1 ^ _KEY_LENGTH
        h2 = k2 ^ _KEY_LENGTH
        h3 = np.full_like(h1, _KEY_LENGTH)  # h3 = h4 = seed ^ len
        h1 = h1 + h2 + h3 + h3
        h2 = h2 + h1
        h3 = h3 + h1  # h4 equals h3 throughout
        h1 = _fmix32(h1)
        h2 = _fmix32(h2)
        h3 = _fmix32(h3)
        h1 = h1 + h2 + h3 + h3
        h2 = h2 + h1
    out: npt.NDArray[np.uint64] = h1.astype(np.uint64) | (h2.astype(np.uint64) << np.uint64(32))
    return out.reshape(np.shape(ids))
