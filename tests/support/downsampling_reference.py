"""A straightforward per-block NumPy reference of the pyramid reductions, written from
`shardwright.common.downsample`'s docstring: the unit tests (tests/common/test_downsample.py) and
the pyramid jobs' (tests/e2e/test_pyramids.py) hold the module against it."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from shardwright.common import downsample


def reference(vol: np.ndarray, factor: tuple[int, int, int], method: str) -> np.ndarray:
    """Straightforward downsampling of a [x, y, z, c] array, block by block."""
    fx, fy, fz = factor
    shape = [-(-n // f) for n, f in zip(vol.shape[:3], factor, strict=True)]
    out = np.empty((*shape, vol.shape[3]), dtype=vol.dtype)
    for i, j, k in itertools.product(*(range(n) for n in shape)):
        block = vol[i * fx : (i + 1) * fx, j * fy : (j + 1) * fy, k * fz : (k + 1) * fz]
        for c in range(vol.shape[3]):
            if method in downsample.MODES:
                out[i, j, k, c] = _mode_of_block(block[..., c], factor, method == "mode-nonzero")
            else:
                out[i, j, k, c] = _reduce_one(block[..., c].ravel(), method, vol.dtype)
    return out


def _mode_of_block(block: np.ndarray, factor: tuple[int, int, int], skip_zero: bool) -> Any:
    """The mode rules as the module docstring words them, one block at a time."""
    values = block.ravel(order="F")  # x fastest
    bits = values.view(f"u{values.dtype.itemsize}").tolist()  # labels compare as bit patterns

    def counts(v: int) -> bool:
        return not (skip_zero and v == 0)

    if sorted(factor) == [1, 2, 2] and len(bits) == 4:  # COUNTLESS on a whole 2x2 block
        a, d = bits[0], bits[3]
        b, c = (bits[1], bits[2]) if factor[0] == 1 else (bits[2], bits[1])  # b along y (z)
        for u, v in ((a, b), (a, c), (b, c)):
            if u == v and counts(u):
                return values[bits.index(u)]
        if counts(d):
            return values[3]
        return next((values[bits.index(v)] for v in (a, b, c) if counts(v)), values[0])
    tally = {v: bits.count(v) for v in bits if counts(v)}
    if not tally:
        return values[0]  # all background
    top = max(tally.values())
    return values[next(i for i, v in enumerate(bits) if tally.get(v) == top)]  # met first


def _reduce_one(values: np.ndarray, method: str, dtype: np.dtype) -> Any:
    n = values.size
    if method == "average":
        if dtype.kind == "f":
            total = 0.0
            for v in values:  # float64, in C order of the block's (x, y, z)
                total += float(v)
            return total / n
        return (sum(int(v) for v in values) + n // 2) // n  # nearest, ties up; exact
    if method == "min":
        return values.min()
    if method == "max":
        return values.max()
    return values[0]  # striding
