"""Arrays handed over from Python: NumPy, Dask, or anything with `shape`, `dtype` and
`__getitem__` (a zarr or h5py array object, a TensorStore handle, a memory map).

Such a source lives in the user's process; a worker process receives it pickled with the
job's plan, once per worker. A Dask array's box is computed on the threads of the worker that
reads it, never nested into the cluster that runs the job.
"""

from __future__ import annotations

import uuid
from typing import Any

import crc32c
import numpy as np

from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, SourceHints


def is_array_like(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("shape", "dtype", "__getitem__"))


class InMemorySource(ArraySource):
    """An array-like in the caller's hands, C-order z,y,x (c,z,y,x) unless `axes` says."""

    def __init__(self, array: Any, axes: str | None = None, hints: SourceHints | None = None):
        if not is_array_like(array):
            raise SourceError(
                f"a {type(array).__name__} is not an array: a source is a path or URL, or an "
                "array with shape, dtype and [] (NumPy, Dask, zarr, h5py)"
            )
        self.array = array
        kind = type(array).__module__.split(".")[0]
        try:
            shape = tuple(int(n) for n in array.shape)
            dtype = np.dtype(array.dtype)
        except (TypeError, ValueError) as exc:
            raise SourceError(f"a {kind} array whose shape or dtype is unusable ({exc})") from exc
        url = f"<{kind} array {shape} {dtype}>"
        super().__init__(url, shape, dtype, axes, hints)
        self._identity: dict[str, Any] | None = None

    def location(self) -> None:
        """An array in memory lies on no store: no destination can be inside it."""
        return None

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        block = self.array[slices]
        if hasattr(block, "compute"):  # a Dask array: computed here, on this worker's threads
            block = block.compute(scheduler="threads")
        elif hasattr(block, "read") and hasattr(block, "domain"):  # a TensorStore handle
            block = block.read().result()
        return np.asarray(block)

    def identity(self) -> dict[str, Any]:
        """What proves this array unchanged for a resumed job: a NumPy array's crc32c, a Dask
        array's token (its graph and inputs); other arrays cannot be proven, so a resumed job
        never trusts their shards (a fresh nonce each time)."""
        if self._identity is None:
            if isinstance(self.array, np.ndarray):
                data = np.ascontiguousarray(self.array)
                self._identity = {
                    "numpy_crc32c": crc32c.crc32c(data.reshape(-1).view(np.uint8).data)
                }
            elif hasattr(self.array, "dask"):
                from dask.base import tokenize

                self._identity = {"dask_token": tokenize(self.array)}
            else:
                self._identity = {"unprovable": uuid.uuid4().hex}
        return self._identity
