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
_PINNED_KEPT = 1  # free landing buffers a thread keeps; more are let go
_PINNED_STEP = 64 << 20  # sizes rounded up to this, so that buffers fit the next request
_STAGING = threading.local()  # each worker thread's staging ring (CuPy only)
_COPY_THREADS = 8  # host threads filling a staging buffer (NumPy copies release the GIL)
_COPY_SLAB = 16 << 20  # below this, one thread copies


def upload(xp: Namespace, host: np.ndarray) -> Array:
    """A host array in `xp`: under CuPy, copied in its own memory order and permuted back on
    the device.

    A source box arrives as a transposed, sliced view ([x, y, z, c] of a z, y, x file). Made
    contiguous in [x, y, z, c] on the host, it was gathered voxel by voxel (0.15 GB/s for
    uint8 on an H200's host); copied in memory order it moves whole rows, by several threads,
    into a pinned staging buffer, which the device then reads at the bus's full speed. The
    copy to the device runs on the thread's current stream while the next box is staged in
    the ring's other buffer (`StagingRing`). The result is a strided view on the device, as
    NumPy's read is on the host.
    """
    if xp is np:
        return host
    order = sorted(range(host.ndim), key=lambda axis: -abs(host.strides[axis]))
    in_memory_order = host.transpose(order)
    ring = staging_ring()
    buffer = ring.fill(host.nbytes)
    staged = buffer[: host.nbytes].view(host.dtype).reshape(in_memory_order.shape)
    _parallel_copy(staged, in_memory_order)
    device = xp.empty(staged.shape, dtype=host.dtype)
    device.set(staged)  # asynchronous: the ring waits for it before it refills this buffer
    copied = xp.cuda.Event(block=False, disable_timing=True)
    copied.record()
    ring.filled(copied)
    return device.transpose(np.argsort(order).tolist())


class StagingRing:
    """Two pinned host buffers a thread fills in turn: a source box is staged in one while
    the other's copy to the device may still run. A buffer is refilled only after the copy
    that reads it is over (its recorded CUDA event), so no copy ever reads a half-staged or
    overwritten box."""

    def __init__(self, slots: int = 2):
        self._buffers: list[np.ndarray | None] = [None] * slots
        self._copies: list[Any] = [None] * slots  # per buffer: the event after its last copy
        self._turn = 0

    def fill(self, nbytes: int) -> np.ndarray:
        """The buffer to stage the next box in (at least `nbytes`), once nothing reads it."""
        turn = self._turn
        copy = self._copies[turn]
        if copy is not None:
            copy.synchronize()
            self._copies[turn] = None
        buffer = self._buffers[turn]
        if buffer is None or buffer.nbytes < nbytes:
            self._buffers[turn] = None  # the smaller buffer goes before the larger is pinned
            buffer = self._buffers[turn] = _new_pinned(nbytes)
        return buffer

    def filled(self, copy: Any) -> None:
        """The buffer from `fill` is being copied until `copy` (an event) is reached."""
        self._copies[self._turn] = copy
        self._turn = (self._turn + 1) % len(self._buffers)


def staging_ring() -> StagingRing:
    """This thread's staging ring."""
    ring: StagingRing | None = getattr(_STAGING, "ring", None)
    if ring is None:
        ring = _STAGING.ring = StagingRing()
    return ring


def take_pinned(nbytes: int) -> np.ndarray:
    """A pinned host buffer (uint8) of at least `nbytes`, one this thread freed if it fits:
    pinning fresh memory costs more than the copy it speeds up."""
    free: list[np.ndarray] = _PINNED.__dict__.setdefault("free", [])
    fitting = [i for i, b in enumerate(free) if b.nbytes >= nbytes]
    if fitting:
        return free.pop(min(fitting, key=lambda i: free[i].nbytes))
    return _new_pinned(nbytes)


def release_pinned(buffer: np.ndarray) -> None:
    """Give a buffer from `take_pinned` back to this thread, once nothing reads it."""
    free: list[np.ndarray] = _PINNED.__dict__.setdefault("free", [])
    free.append(buffer)
    if len(free) > _PINNED_KEPT:
        free.pop(min(range(len(free)), key=lambda i: free[i].nbytes))


def _new_pinned(nbytes: int) -> np.ndarray:
    """Freshly pinned host memory, rounded up so that it fits the next requests too."""
    import cupyx  # only where the array namespace is CuPy

    size = max(_PINNED_STEP, -(-nbytes // _PINNED_STEP) * _PINNED_STEP)
    return cupyx.empty_pinned(size, dtype=np.uint8)


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


def contiguous(xp: Namespace, array: Array) -> Array:
    """`array` C-contiguous (itself when it is): NumPy copies through `copy_runs`."""
    if xp is not np or array.flags.c_contiguous:
        return xp.ascontiguousarray(array)
    out = np.empty(array.shape, array.dtype)
    copy_runs(out, array)
    return out


def copy_runs(out: np.ndarray, source: np.ndarray) -> None:
    """`out[...] = source` (same shape), the last axis moved as whole runs of bytes where it
    is contiguous in both.

    NumPy copies a strided array one element of its last axis at a time: a chunk of 64 uint8
    voxels per row cut out of a volume went at 3 GB/s. Seen as one opaque element per row
    (a void type of the row's bytes), each row is one move: 1.4 to 3.5 times the speed for
    rows of 8 to 256 bytes, never slower for longer ones (the bytes are the same).
    """
    run = source.shape[-1] * source.itemsize if source.ndim else 0
    if (
        source.ndim > 1
        and source.shape[-1] > 1
        and source.strides[-1] == source.itemsize
        and out.strides[-1] == out.itemsize
        and source.dtype == out.dtype
        and not source.dtype.hasobject
    ):
        rows = np.dtype((np.void, run))
        out.view(rows)[...] = source.view(rows)
    else:
        np.copyto(out, source)


def exclusive_scan(xp: Namespace, sizes: Array) -> Array:
    """Start offset of each segment when segments of `sizes` are packed back to back."""
    sizes = xp.asarray(sizes, dtype=xp.int64)
    return xp.cumsum(sizes) - sizes


def gather_segments(
    xp: Namespace, buffer: Array, offsets: Array, sizes: Array, order: Array
) -> Array:
    """Byte segments [offsets[i], offsets[i] + sizes[i]) of `buffer` (of any dtype), in
    `order`, packed densely.

    One vectorized gather, no loop over chunks: segments of one size packed back to back (raw
    chunks) are rows of the buffer, gathered whole; otherwise each output byte's source index
    is its segment's source offset plus its position within the segment (an index per byte:
    int32 where the buffer allows, halving that temporary).
    """
    order = xp.asarray(order, dtype=xp.int64)
    data = xp.ascontiguousarray(xp.asarray(buffer)).reshape(-1).view(xp.uint8)  # its bytes
    host_sizes = np.asarray(to_host(sizes), dtype=np.int64)
    host_offsets = np.asarray(to_host(offsets), dtype=np.int64)
    if len(host_sizes) and _rows(host_offsets, host_sizes):
        size = int(host_sizes[0])
        if size == 0:
            return xp.zeros(0, dtype=xp.uint8)
        return data[: len(host_sizes) * size].reshape(-1, size)[order].reshape(-1)
    sizes = xp.asarray(host_sizes)[order]
    offsets = xp.asarray(host_offsets)[order]
    total = int(sizes.sum())
    if total == 0:
        return xp.zeros(0, dtype=xp.uint8)
    index = xp.int32 if max(data.size, total) < 2**31 else xp.int64
    starts = exclusive_scan(xp, sizes)
    shift = xp.repeat((offsets - starts).astype(index), sizes)
    return data[shift + xp.arange(total, dtype=index)]


def _rows(offsets: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether the segments are equal-sized and packed back to back from the buffer's start."""
    size = sizes[0]
    return bool((sizes == size).all() and (offsets == np.arange(len(sizes)) * size).all())


def to_host(array: Array) -> np.ndarray:
    """A device array's bytes on the host (numpy arrays as they are)."""
    get = getattr(array, "get", None)  # cupy arrays copy to host with .get()
    return get() if callable(get) else np.asarray(array)
