"""The array types shared by the CPU and GPU paths, and the generic primitives over them.

Code that runs on either engine is written once over an array namespace `xp` (NumPy or CuPy).
CuPy is imported only on GPU workers, so its types cannot appear in annotations: `Array` names
"a numpy.ndarray or a cupy.ndarray" and `Namespace` the module (`numpy` or `cupy`) that made it.
`exclusive_scan` and `gather_segments` pack variable-length segments of one buffer, with no loop
over segments: the batched codecs and the engine's aggregation both build on them.
"""

from __future__ import annotations

from typing import Any, TypeAlias

Array: TypeAlias = Any
"""A numpy.ndarray or a cupy.ndarray."""

Namespace: TypeAlias = Any
"""The `numpy` or `cupy` module."""


def exclusive_scan(xp: Namespace, sizes: Array) -> Array:
    """Start offset of each segment when segments of `sizes` are packed back to back."""
    sizes = xp.asarray(sizes, dtype=xp.int64)
    return xp.cumsum(sizes) - sizes


def gather_segments(
    xp: Namespace, buffer: Array, offsets: Array, sizes: Array, order: Array
) -> Array:
    """Segments [offsets[i], offsets[i] + sizes[i]) of `buffer`, in `order`, packed densely.

    One vectorized gather, no loop over chunks: each output byte's source index is its
    segment's source offset plus its position within the segment.
    """
    order = xp.asarray(order, dtype=xp.int64)
    sizes = xp.asarray(sizes, dtype=xp.int64)[order]
    offsets = xp.asarray(offsets, dtype=xp.int64)[order]
    total = int(sizes.sum())
    if total == 0:
        return xp.zeros(0, dtype=xp.uint8)
    starts = exclusive_scan(xp, sizes)
    shift = xp.repeat(offsets - starts, sizes)
    return xp.asarray(buffer, dtype=xp.uint8)[shift + xp.arange(total, dtype=xp.int64)]
