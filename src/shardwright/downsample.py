"""Downsampling reductions for pyramids, written once over an array namespace (NumPy or CuPy).

A block indexed [x, y, z, c] is reduced by an integer factor (fx, fy, fz): each output voxel
summarises one block of up to fx * fy * fz input voxels. Where a volume's size is not a
multiple of the factor, the blocks along its far edges are partial, and every method reduces
them over their real voxels only (no padding value ever enters a result):

- ``average`` (images): integers get the mean rounded to nearest with ties up, i.e.
  ``floor((sum + n // 2) / n)`` over the block's n real voxels, computed exactly (a wide
  accumulator, or quotient and remainder sums for 64-bit types); floats are summed in float64 in
  C order of the block's (x, y, z) positions, divided by n and cast back.
- ``mode`` (segmentations): the most frequent non-zero value; ties go to the smallest value;
  zero only if every voxel of the block is zero (zero is background: thin labelled structures
  survive downsampling instead of being swallowed by it).
- ``min`` / ``max``: over the real voxels.
- ``striding``: the block's first voxel (lowest x, y, z).

Levels are built from the level below (level k = reduce(level k - 1)), as Igneous does.
There is no Python loop per voxel: loops run over the <= 8 edge regions of a block and over
the <= fx * fy * fz positions inside a downsampling block, each step a whole-array operation.
Integer results are exact and float sums run in a fixed order, so CuPy gives NumPy's bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from shardwright.arrays import Array
from shardwright.errors import PyramidError

_reduce: ModuleType | None
try:  # C kernels for the common cases (built at install when a compiler is present)
    from shardwright import _reduce
except ImportError:  # pragma: no cover - exercised by installs without a C compiler
    _reduce = None

Factor = tuple[int, int, int]

METHODS = ("average", "mode", "min", "max", "striding")


def default_method(layer_type: str) -> str:
    """Images are averaged; segmentations take the mode (averaging would invent labels)."""
    return "mode" if layer_type == "segmentation" else "average"


def check_method(method: str, dtype: np.dtype, layer_type: str) -> None:
    """Refuse a method the data cannot take, with the reason."""
    if method not in METHODS:
        raise PyramidError(f"unknown downsampling method {method!r}; choose one of {METHODS}")
    if np.dtype(dtype).kind not in "uif":
        raise PyramidError(f"cannot downsample {np.dtype(dtype)} voxels; integers or floats only")
    if method == "average" and layer_type == "segmentation":
        raise PyramidError(
            "average blends label ids into labels that do not exist; downsample a segmentation "
            "with mode (the default), min, max or striding"
        )


def check_factor(factor: Any) -> Factor:
    """Three positive integers x, y, z, at least one above 1."""
    try:
        values = tuple(int(f) for f in factor)
        exact = all(int(f) == f for f in factor)
    except (TypeError, ValueError):
        values, exact = (), False
    if len(values) != 3 or not exact or min(values) < 1 or max(values) < 2:
        raise PyramidError(
            f"downsampling factor must be three positive integers x,y,z with at least one "
            f"above 1 (e.g. 2,2,2 or 2,2,1), got {factor!r}"
        )
    x, y, z = values
    return (x, y, z)


def reduced_shape(shape_xyz: tuple[int, ...], factor: Factor) -> tuple[int, int, int]:
    """Size of the next level: ceil(size / factor), edge blocks counting as whole voxels."""
    x, y, z = (-(-int(n) // f) for n, f in zip(shape_xyz[:3], factor, strict=True))
    return (x, y, z)


def downsample(
    xp: Any, block: Array, factor: Factor, method: str, *, max_slab_bytes: int | None = None
) -> Array:
    """Reduce a [x, y, z, c] block by `factor`; its origin must sit on a block corner.

    Reductions run over z-slabs of whole downsampling blocks holding at most `max_slab_bytes`
    of input, so temporaries (mode sorts a copy of its input) stay bounded for any block size.
    """
    block = xp.asarray(block)
    if block.ndim != 4:
        raise PyramidError(f"expected a [x, y, z, c] block, got shape {block.shape}")
    if method not in METHODS:
        raise PyramidError(f"unknown downsampling method {method!r}; choose one of {METHODS}")
    fx, fy, fz = factor
    nx, ny, nz, channels = block.shape
    # The output takes the input's layout (x fastest for sources read z, y, x): accumulators
    # then walk both in memory order.
    order = "F" if abs(block.strides[0]) <= abs(block.strides[2]) else "C"
    out = xp.empty((*reduced_shape(block.shape, factor), channels), dtype=block.dtype, order=order)
    if method == "striding":
        out[...] = block[::fx, ::fy, ::fz]
        return out
    if xp is np and _reduce is not None and _c_reducible(method, block.dtype, factor):
        getattr(_reduce, method)(block, out, (fx, fy, fz))  # no temporaries, no GIL
        return out
    reduce = _REDUCERS[method]
    plane = nx * ny * fz * channels * block.dtype.itemsize  # one z-layer of blocks
    layers = max(1, (max_slab_bytes or 0) // max(plane, 1)) if max_slab_bytes else nz
    for z0 in range(0, nz, layers * fz):
        z1 = min(z0 + layers * fz, nz)
        for (x0, x1, bx), (y0, y1, by), (s0, s1, bz) in itertools.product(
            _runs(0, nx, fx), _runs(0, ny, fy), _runs(z0, z1, fz)
        ):
            region = block[x0:x1, y0:y1, s0:s1, :]
            lifted = region.reshape(
                (x1 - x0) // bx, bx, (y1 - y0) // by, by, (s1 - s0) // bz, bz, channels
            )
            out[x0 // fx : -(-x1 // fx), y0 // fy : -(-y1 // fy), s0 // fz : -(-s1 // fz)] = reduce(
                xp, lifted
            )
    return out


def _c_reducible(method: str, dtype: np.dtype, factor: Factor) -> bool:
    """Whether `_reduce` computes this case (NumPy does the rest: floats, 64-bit means)."""
    if not dtype.isnative or dtype.kind not in "iu" or math.prod(factor) > C_MAX_BLOCK:
        return False
    if method == "mode":  # labels: NumPy's vectorized sorting network wins on small types
        return dtype.itemsize >= 4
    return method == "average" and dtype.itemsize <= 4


C_MAX_BLOCK = 64


def _runs(start: int, stop: int, factor: int) -> list[tuple[int, int, int]]:
    """(start, stop, block length) along one axis: whole blocks, then the partial edge block."""
    full = start + (stop - start) // factor * factor
    runs = [(start, full, factor)] if full > start else []
    if full < stop:
        runs.append((full, stop, stop - full))
    return runs


def _positions(lifted: Array) -> list[Array]:
    """Views [nbx, nby, nbz, c] of each position inside the blocks, in C order of (x, y, z)."""
    _, bx, _, by, _, bz, _ = lifted.shape
    return [
        lifted[:, i, :, j, :, k, :]
        for i, j, k in itertools.product(range(bx), range(by), range(bz))
    ]


def _average(xp: Any, lifted: Array) -> Array:
    dtype = lifted.dtype
    views = _positions(lifted)
    n = len(views)
    if dtype.kind == "f":
        total = xp.zeros_like(views[0], dtype=xp.float64)
        for view in views:
            total += view
        total /= n
        return total.astype(dtype)
    wide = _accumulator(dtype, n)
    if wide is not None:  # integer sums are exact in any order: fold axis by axis
        acc = _fold_axes(xp, xp.add, lifted, wide)
        acc += n // 2
        acc //= n
        return acc.astype(dtype)
    # 64-bit integers: no wider type. Signed values are shifted into uint64 (x ^ 2**63 is
    # x + 2**63, order kept), then floor((sum + h) / n) = sum(q) + floor((sum(r) + h) / n)
    # with q, r = divmod(v, n): every partial sum stays in range.
    unsigned = np.dtype(f"u{dtype.itemsize}")
    flip = xp.asarray(1 << 63, dtype=unsigned) if dtype.kind == "i" else None
    quotient = xp.zeros_like(views[0], dtype=unsigned)
    remainder = xp.zeros_like(views[0], dtype=unsigned)
    for view in views:
        u = view.view(unsigned) if flip is None else view.view(unsigned) ^ flip
        quotient += u // n
        remainder += u % n
    remainder += n // 2
    remainder //= n
    quotient += remainder
    if flip is not None:
        quotient ^= flip
    return quotient.view(dtype)


def _accumulator(dtype: np.dtype, n: int) -> np.dtype | None:
    """The narrowest integer type holding n * max + n // 2 of `dtype` (same signedness)."""
    needed = dtype.itemsize * 8 + n.bit_length()
    for bits in (16, 32, 64):
        if bits >= needed:
            return np.dtype(f"{dtype.kind}{bits // 8}")
    return None


def _mode(xp: Any, lifted: Array) -> Array:
    views = _positions(lifted)
    n = len(views)
    # Row j holds every block's j-th value (rows contiguous, in the input's memory order);
    # sorting each block's column makes equal values runs of consecutive rows.
    x_fastest = abs(views[0].strides[0]) <= abs(views[0].strides[2])
    shape = views[0].shape[::-1] if x_fastest else views[0].shape
    values = xp.empty((n, *shape), dtype=lifted.dtype)
    for j, view in enumerate(views):
        values[j] = view.transpose(3, 2, 1, 0) if x_fastest else view
    values = values.reshape(n, -1)
    if values.dtype.kind == "f" or n > MAX_NETWORK:
        values = xp.sort(values, axis=0)  # NaNs last (a min/max network would copy them)
    else:
        for i, j in sorting_network(n):
            low = xp.minimum(values[i], values[j])
            xp.maximum(values[i], values[j], out=values[j])
            values[i] = low
    run_dtype = np.dtype(np.uint8 if n < 255 else np.uint32)
    first = values[0]
    run = xp.ones(first.shape, dtype=run_dtype)  # length of the run ending at row j
    best = (first != 0).astype(run_dtype)  # zero never counts
    best_value = first.copy()
    for j in range(1, n):
        row = values[j]
        run *= row == values[j - 1]
        run += 1
        score = run * (row != 0)
        # Strictly greater: of equally long runs the first, i.e. the smallest value, wins.
        xp.copyto(best_value, row, where=score > best)
        xp.maximum(best, score, out=best)
    result = best_value.reshape(shape)
    return result.transpose(3, 2, 1, 0) if x_fastest else result


MAX_NETWORK = 64  # larger blocks sort with xp.sort


def sorting_network(n: int) -> list[tuple[int, int]]:
    """Batcher's odd-even merge sort comparators (low index first) for n values.

    Built for the next power of two; comparators reaching past n are dropped (those inputs
    act as +infinity at the end, which such a comparator would leave in place).
    """
    size = 1 << max(n - 1, 0).bit_length()
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(k):
                    a, b = i + j, i + j + k
                    if b < n and a // (2 * p) == b // (2 * p):
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return pairs


def _min(xp: Any, lifted: Array) -> Array:
    return _fold_axes(xp, xp.minimum, lifted, lifted.dtype)


def _max(xp: Any, lifted: Array) -> Array:
    return _fold_axes(xp, xp.maximum, lifted, lifted.dtype)


def _fold_axes(xp: Any, op: Any, lifted: Array, dtype: Any) -> Array:
    """An associative, commutative op over each block, one axis at a time.

    The slowest-varying axis in memory goes first: its positions are whole contiguous runs
    of the fast axis, so each step is a vectorized pass that reads its input once and writes
    an array a fraction of its size (x, the fast axis of sources read z, y, x, comes last,
    when the data has shrunk). Far less memory traffic than visiting the block's positions
    one by one over the whole input.
    """
    current = lifted
    for axis in sorted((1, 3, 5), key=lambda a: -abs(lifted.strides[a])):

        def at(i: int, axis: int = axis) -> tuple[slice, ...]:
            return (slice(None),) * axis + (slice(i, i + 1),)

        first = current[at(0)]
        if current.shape[axis] == 1:  # a factor of 1 (or a one-voxel edge): nothing to fold
            current = first if first.dtype == dtype else first.astype(dtype)
            continue
        acc = xp.empty_like(first, dtype=dtype)
        op(first, current[at(1)], out=acc, dtype=dtype)  # dtype: sum uint8 in uint16, etc.
        for i in range(2, current.shape[axis]):
            op(acc, current[at(i)], out=acc, dtype=dtype)
        current = acc
    nbx, _, nby, _, nbz, _, channels = current.shape
    return current.reshape(nbx, nby, nbz, channels)


_REDUCERS: dict[str, Callable[[Any, Array], Array]] = {
    "average": _average,
    "mode": _mode,
    "min": _min,
    "max": _max,
}
