"""The array types shared by the CPU and GPU paths, and the generic primitives over them.

Code that runs on either engine is written once over an array namespace `xp` (NumPy or CuPy).
CuPy is imported only on GPU workers, so its types cannot appear in annotations: `Array` names
"a numpy.ndarray or a cupy.ndarray" and `Namespace` the module (`numpy` or `cupy`) that made it.
`exclusive_scan` and `gather_segments` pack variable-length segments of one buffer, with no loop
over segments: the batched codecs and the engine's aggregation both build on them.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

import numpy as np

Array: TypeAlias = Any
"""A numpy.ndarray or a cupy.ndarray."""

Namespace: TypeAlias = Any
"""The `numpy` or `cupy` module."""


_PINNED = threading.local()  # each worker thread's free pinned host buffers (CuPy only)
_PINNED_KEPT = 2  # free buffers a thread keeps (a staging and a landing one); more are let go
_PINNED_STEP = 64 << 20  # sizes rounded up to this, so that buffers fit the next request
_COPY_THREADS = 8  # host threads filling a staging buffer (NumPy copies release the GIL)
_COPY_SLAB = 16 << 20  # below this, one thread copies


def upload(xp: Namespace, host: np.ndarray) -> Array:
    """A host array in `xp`: under CuPy, copied in its own memory order and permuted back on
    the device.

    A source box arrives as a transposed, sliced view ([x, y, z, c] of a z, y, x file). Made
    contiguous in [x, y, z, c] on the host, it was gathered voxel by voxel (0.15 GB/s for
    uint8 on an H200's host); copied in memory order it moves whole rows, by several threads,
    into a pinned staging buffer, which the device then reads at the bus's full speed. The
    result is a strided view on the device, as NumPy's read is on the host.
    """
    if xp is np:
        return host
    order = sorted(range(host.ndim), key=lambda axis: -abs(host.strides[axis]))
    in_memory_order = host.transpose(order)
    buffer = take_pinned(host.nbytes)
    try:
        staged = buffer[: host.nbytes].view(host.dtype).reshape(in_memory_order.shape)
        _parallel_copy(staged, in_memory_order)
        device = xp.empty(staged.shape, dtype=host.dtype)
        device.set(staged)  # synchronous: the staging buffer is free again when it returns
    finally:
        release_pinned(buffer)
    return device.transpose(np.argsort(order).tolist())


def take_pinned(nbytes: int) -> np.ndarray:
    """A pinned host buffer (uint8) of at least `nbytes`, one this thread freed if it fits:
    pinning fresh memory costs more than the copy it speeds up."""
    free: list[np.ndarray] = _PINNED.__dict__.setdefault("free", [])
    fitting = [i for i, b in enumerate(free) if b.nbytes >= nbytes]
    if fitting:
        return free.pop(min(fitting, key=lambda i: free[i].nbytes))
    import cupyx  # only where the array namespace is CuPy

    size = max(_PINNED_STEP, -(-nbytes // _PINNED_STEP) * _PINNED_STEP)
    return cupyx.empty_pinned(size, dtype=np.uint8)


def release_pinned(buffer: np.ndarray) -> None:
    """Give a buffer from `take_pinned` back to this thread, once nothing reads it."""
    free: list[np.ndarray] = _PINNED.__dict__.setdefault("free", [])
    free.append(buffer)
    if len(free) > _PINNED_KEPT:
        free.pop(min(range(len(free)), key=lambda i: free[i].nbytes))


def _parallel_copy(out: np.ndarray, source: np.ndarray) -> None:
    """`out[...] = source`, split along the first axis over a few threads when large."""
    if out.nbytes < _COPY_SLAB or out.ndim == 0 or out.shape[0] < 2:
        np.copyto(out, source)
        return
    parts = min(_COPY_THREADS, out.shape[0], max(1, out.nbytes // _COPY_SLAB))
    bounds = np.linspace(0, out.shape[0], parts + 1).astype(int).tolist()

    def copy_part(i: int) -> None:
        np.copyto(out[bounds[i] : bounds[i + 1]], source[bounds[i] : bounds[i + 1]])

    with ThreadPoolExecutor(parts) as pool:
        list(pool.map(copy_part, range(parts)))


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
