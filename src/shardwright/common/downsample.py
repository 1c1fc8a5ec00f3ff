"""Downsampling reductions for pyramids, written once over an array namespace (NumPy or CuPy).

A block indexed [x, y, z, c] is reduced by an integer factor (fx, fy, fz): each output voxel
summarises one block of up to fx * fy * fz input voxels. Where a volume's size is not a
multiple of the factor, the blocks along its far edges are partial, and every method reduces
them over their real voxels only (no padding value ever enters a result):

- ``average`` (images): integers get the mean rounded to nearest with ties up, i.e.
  ``floor((sum + n // 2) / n)`` over the block's n real voxels, computed exactly (a wide
  accumulator, or quotient and remainder sums for 64-bit types); floats are summed in float64
  (complex numbers in complex128) in C order of the block's (x, y, z) positions, divided by n
  and cast back. Booleans have no average: a mask takes the mode by default.
- ``mode`` (segmentations, the default): the most frequent value, zero counting like any
  label: tinybrain's ``downsample_segmentation(sparse=False)``, what Igneous writes, the
  faithful majority of each block.
- ``mode-nonzero``: the most frequent non-zero value; zero only if every voxel of the block is
  zero (tinybrain's ``sparse=True``): zero is background, so thin labelled structures (axons,
  membranes) survive downsampling instead of being swallowed by it.

  Both compare voxels as bit patterns, as tinybrain's kernels do (signed and float voxels as
  the unsigned integers of their size: -0.0 is not 0.0, a NaN is a label like any other), and
  break ties as tinybrain does, which depends on the factor. A factor halving exactly two
  axes (2,2,1 and its turns): COUNTLESS on each whole 2x2 block a, b, c, d (a its first
  voxel, d the last, b one voxel along y from a and c along the other axis; at 2,1,2 b along
  z, c along x): a value met twice among a, b, c wins, otherwise d (mode-nonzero: d if it is
  non-zero, otherwise the first non-zero of a, b, c). Any other factor, and every partial
  edge block: of equally frequent values, the one met first in x-fastest order. That is
  tinybrain's 2x2x2 kernel, which pads a partial block by repeating its edge voxels (every
  count scaled alike: the same rule over the real voxels); at 2,2,1 a partial block holds
  two voxels or one, and tinybrain keeps the first (mode-nonzero: the first non-zero).
  Equal to tinybrain at 2,2,2, 2,2,1, 2,1,2 and 1,2,2 (the tests hold it); at other factors
  tinybrain computes no mode of the whole block (it strides, or halves twice), and the
  counting rule applies.
- ``min`` / ``max``: over the real voxels (booleans: all / any; complex numbers have no order).
- ``striding``: the block's first voxel (lowest x, y, z), of any voxel type.

Levels are built from the level below (level k = reduce(level k - 1)), as Igneous does.
There is no Python loop per voxel: loops run over the <= 8 edge regions of a block and over
the <= fx * fy * fz positions inside a downsampling block (the modes: over pairs of them, or
a sort), each step a whole-array operation.
Integer results are exact and float sums run in a fixed order, so CuPy gives NumPy's bytes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from shardwright.errors import NAMED, PyramidError

# NumPy is imported by the functions that use it: the command line's parser reads METHODS and
# METHOD_HELP (options/volume.py), and `--help` imports no NumPy.
if TYPE_CHECKING:
    import numpy as np

    from shardwright.common.arrays import Array

_reduce: ModuleType | None
try:  # C kernels for the common cases (built at install when a compiler is present)
    from shardwright.common import _reduce
except ImportError:  # pragma: no cover - exercised by installs without a C compiler
    _reduce = None

Factor = tuple[int, int, int]

METHODS = ("average", "mode", "mode-nonzero", "min", "max", "striding")
MODES = ("mode", "mode-nonzero")  # reductions to one of the block's labels, by count
# Bumped whenever a method's results change (2: `mode` became plain mode, tinybrain's tie
# rules): a job's fingerprint records it, so a resumed job never mixes levels of two rules.
RULES = 2
METHOD_HELP = (  # --downsample's help: which method to pick, and why
    "pyramid reduction (default: average for images, mode for segmentations and masks). "
    "mode: each block's most frequent label, background included, as tinybrain and Igneous "
    "downsample (the faithful majority); mode-nonzero: its most frequent non-zero label, "
    "zero only where the block is all zero, so thin labelled structures (axons, membranes) "
    "survive instead of being swallowed by background"
)


# The voxel kinds (numpy's) each method applies to: an average of booleans, a least complex
# number or a most frequent complex value mean nothing a viewer could show.
KINDS = {"average": "uifc", "mode": "buif", "mode-nonzero": "buif", "min": "buif",
         "max": "buif", "striding": "buifc"}  # fmt: skip
WHY = {"b": "booleans have no average", "c": "complex numbers have no order and are no labels"}


def default_method(layer_type: str, dtype: np.dtype | None = None) -> str:
    """Images are averaged; segmentations and masks (bool) take the plain mode, the field's
    default (averaging would invent labels; booleans have no average)."""
    import numpy as np

    is_mask = dtype is not None and np.dtype(dtype).kind == "b"
    return "mode" if layer_type == "segmentation" or is_mask else "average"


def check_method(method: str, dtype: np.dtype, layer_type: str) -> None:
    """Refuse a method the data cannot take, with the reason."""
    import numpy as np

    if method not in METHODS:
        raise PyramidError(f"unknown downsampling method {method!r}; choose one of {METHODS}")
    kind = np.dtype(dtype).kind
    if kind not in KINDS[method]:
        fits = [m for m in METHODS if kind in KINDS[m]]
        raise PyramidError(
            f"{method} cannot downsample {np.dtype(dtype)} voxels "
            f"({WHY.get(kind, 'they are not numbers')}); "
            + (f"pass {{downsample}} {_either(fits)}" if fits else "build no pyramid"),
            downsample=NAMED,
        )
    if method == "average" and layer_type == "segmentation":
        raise PyramidError(
            "average blends label ids into labels that do not exist; downsample a segmentation "
            "with mode (the default), mode-nonzero, min, max or striding"
        )


def _either(words: list[str]) -> str:
    """`a, b or c`."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


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


def factor_between(finer: Any, coarser: Any) -> Factor | None:
    """The factor that made a pyramid's level of voxel size `coarser` from one of `finer`
    (x, y, z): whole numbers, at least one above 1; None where the sizes are no such step."""
    try:
        ratios = [float(c) / float(f) for f, c in zip(finer, coarser, strict=True)]
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    whole = [round(r) for r in ratios]
    if len(whole) != 3 or any(
        abs(r - w) > 1e-6 * w or w < 1 for r, w in zip(ratios, whole, strict=True)
    ):
        return None
    x, y, z = whole
    return (x, y, z) if max(whole) > 1 else None


def reduced_shape(shape_xyz: tuple[int, ...], factor: Factor) -> tuple[int, int, int]:
    """Size of the next level: ceil(size / factor), edge blocks counting as whole voxels."""
    x, y, z = (-(-int(n) // f) for n, f in zip(shape_xyz[:3], factor, strict=True))
    return (x, y, z)


def downsample(
    xp: Any, block: Array, factor: Factor, method: str, *, max_slab_bytes: int | None = None
) -> Array:
    """Reduce a [x, y, z, c] block by `factor`; its origin must sit on a block corner.

    Reductions run over z-slabs of whole downsampling blocks holding at most `max_slab_bytes`
    of input, so temporaries (mode copies its input) stay bounded for any block size.
    """
    import numpy as np

    block = xp.asarray(block)
    if block.ndim != 4:
        raise PyramidError(f"expected a [x, y, z, c] block, got shape {block.shape}")
    if method not in METHODS:
        raise PyramidError(f"unknown downsampling method {method!r}; choose one of {METHODS}")
    if method in MODES:  # labels as bit patterns: one reduction for every voxel type
        labels = block.view(np.dtype(f"u{block.dtype.itemsize}"))
        return _reduced(xp, labels, factor, method, max_slab_bytes).view(block.dtype)
    return _reduced(xp, block, factor, method, max_slab_bytes)


def _reduced(
    xp: Any, block: Array, factor: Factor, method: str, max_slab_bytes: int | None
) -> Array:
    import numpy as np

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
        getattr(_reduce, method.replace("-", "_"))(block, out, factor)  # no temporaries, no GIL
        return out
    reduce = _reducer(method, factor)
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
    if method in MODES:  # labels: NumPy's vectorized comparisons win on small types and blocks
        return dtype.itemsize >= 4 or math.prod(factor) > 16
    return method == "average" and dtype.itemsize <= 4


C_MAX_BLOCK = 64


def _runs(start: int, stop: int, factor: int) -> list[tuple[int, int, int]]:
    """(start, stop, block length) along one axis: whole blocks, then the partial edge block."""
    full = start + (stop - start) // factor * factor
    runs = [(start, full, factor)] if full > start else []
    if full < stop:
        runs.append((full, stop, stop - full))
    return runs


def _positions(lifted: Array, x_fastest: bool = False) -> list[Array]:
    """Views [nbx, nby, nbz, c] of each position inside the blocks, in C order of (x, y, z),
    or x fastest: the order in which tinybrain's mode kernels meet a block's voxels."""
    _, bx, _, by, _, bz, _ = lifted.shape
    grid = list(itertools.product(range(bx), range(by), range(bz)))
    if x_fastest:
        grid.sort(key=lambda ijk: ijk[::-1])
    return [lifted[:, i, :, j, :, k, :] for i, j, k in grid]


def _average(xp: Any, lifted: Array) -> Array:
    import numpy as np

    dtype = lifted.dtype
    views = _positions(lifted)
    n = len(views)
    if dtype.kind in "fc":  # complex: both parts summed in float64
        total = xp.zeros_like(views[0], dtype=xp.complex128 if dtype.kind == "c" else xp.float64)
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
    import numpy as np

    needed = dtype.itemsize * 8 + n.bit_length()
    for bits in (16, 32, 64):
        if bits >= needed:
            return np.dtype(f"{dtype.kind}{bits // 8}")
    return None


def _reducer(method: str, factor: Factor) -> Callable[[Any, Array], Array]:
    if method in MODES:
        return functools.partial(
            _mode, skip_zero=method == "mode-nonzero", countless=_countless_order(factor)
        )
    return _REDUCERS[method]


def _countless_order(factor: Factor) -> tuple[int, int, int, int] | None:
    """Where a, b, c, d sit among a whole block's x-fastest positions, for a factor halving
    exactly two axes (None for any other): b one voxel along y from a, c along the other axis
    (at 2,1,2: b along z, c along x), as tinybrain takes them."""
    if sorted(factor) != [1, 2, 2]:
        return None
    return (0, 1, 2, 3) if factor[0] == 1 else (0, 2, 1, 3)


def _mode(
    xp: Any, lifted: Array, *, skip_zero: bool, countless: tuple[int, int, int, int] | None
) -> Array:
    """The module's mode rules over blocks of unsigned labels (see the module docstring)."""
    views = _positions(lifted, x_fastest=True)
    n = len(views)
    # Row j holds every block's j-th value, rows contiguous in the input's memory order:
    # each row is read many times below.
    x_fast_in_memory = abs(views[0].strides[0]) <= abs(views[0].strides[2])
    shape = views[0].shape[::-1] if x_fast_in_memory else views[0].shape
    values = xp.empty((n, *shape), dtype=lifted.dtype)
    for j, view in enumerate(views):
        values[j] = view.transpose(3, 2, 1, 0) if x_fast_in_memory else view
    values = values.reshape(n, -1)
    if countless is not None and n == 4:  # a whole block; partial ones hold two voxels or one
        a, b, c, d = (values[j] for j in countless)
        result = _countless(xp, a, b, c, d, skip_zero)
    elif n <= MAX_COUNTED:
        result = _mode_by_counts(xp, values, skip_zero)
    else:
        result = _mode_by_sorting(xp, values, skip_zero)
    result = result.reshape(shape)
    return result.transpose(3, 2, 1, 0) if x_fast_in_memory else result


def _countless(xp: Any, a: Array, b: Array, c: Array, d: Array, skip_zero: bool) -> Array:
    """tinybrain's COUNTLESS: a value met twice among a, b, c, otherwise d; skipping zero, d if
    it is non-zero, otherwise the first non-zero of a, b, c."""
    a_twice = (a == b) | (a == c)
    pair = xp.where(a_twice, a, b)
    has_pair = a_twice | (b == c)
    if not skip_zero:
        return xp.where(has_pair, pair, d)
    first = xp.where(a != 0, a, xp.where(b != 0, b, c))
    return xp.where(has_pair & (pair != 0), pair, xp.where(d != 0, d, first))


def _mode_by_counts(xp: Any, values: Array, skip_zero: bool) -> Array:
    """Each row's value counted from that row on: at a value's first row the count is its
    whole count, at later rows less. The strictly greatest count wins, so of equally frequent
    values the one met first does (tinybrain's counting kernel); zero where none counts."""
    import numpy as np

    n = values.shape[0]
    best = xp.zeros(values.shape[1:], dtype=np.uint8)  # n <= MAX_COUNTED
    best_value = xp.zeros_like(values[0])
    count = xp.empty_like(best)
    same = xp.empty(values.shape[1:], dtype=bool)
    for i in range(n):
        count.fill(1)
        for j in range(i + 1, n):
            xp.equal(values[i], values[j], out=same)
            count += same
        if skip_zero:
            xp.not_equal(values[i], 0, out=same)
            count *= same
        xp.greater(count, best, out=same)
        xp.copyto(best_value, values[i], where=same)
        xp.maximum(best, count, out=best)
    return best_value


MAX_COUNTED = 64  # n * n / 2 comparisons up to 64 voxels a block; a stable sort beyond


def _mode_by_sorting(xp: Any, values: Array, skip_zero: bool) -> Array:
    """The same rule where counting would cost more than sorting: each block's values sorted
    stably, so a run of equal values starts at the value's first row; the longest run wins,
    of equally long runs the one whose value was met first."""
    import numpy as np

    n = values.shape[0]
    blocks = xp.ascontiguousarray(values.T)  # each block's values contiguous: the sort's axis
    order = xp.argsort(blocks, axis=1, kind="stable")
    ordered = xp.take_along_axis(blocks, order, axis=1)
    best = xp.zeros(blocks.shape[0], dtype=np.uint32)
    best_first = xp.zeros_like(order[:, 0])
    best_value = xp.zeros_like(ordered[:, 0])
    run = xp.ones_like(best)  # length of the run ending at column j
    first = order[:, 0].copy()  # the row its value was met first in
    for j in range(n):
        value = ordered[:, j]
        if j:
            same = value == ordered[:, j - 1]
            run *= same
            run += 1
            xp.copyto(first, order[:, j], where=~same)
        score = run * (value != 0) if skip_zero else run
        better = (score > best) | ((score == best) & (first < best_first))
        xp.copyto(best_value, value, where=better)
        xp.copyto(best_first, first, where=better)
        xp.maximum(best, score, out=best)
    return best_value


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
    "min": _min,
    "max": _max,
}
