"""Benchmark parts, not user features: a source that makes its voxels when read and a
destination that discards shard bodies, so a job of any size runs on a laptop and measures
the job's own machinery (planning, submission, scheduling, journaling) rather than storage.

- `SyntheticSource(shape_xyz)`: uint8 voxels computed from the box's origin (a cheap fill), any
  shape (a petabyte costs nothing until read). Picklable; workers import this module.
- `discard://PATH`: an fsspec filesystem that writes control objects (`.shardwright/`: lease,
  journal receipts; metadata; the manifest) to the local folder PATH as usual and discards
  every other object's bytes after counting them. Registered on import.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from shardwright.sources.base import SourceHints

KEPT_NAMES = ("info", "zarr.json", "shardwright-manifest.json")


class SyntheticSource:
    """Voxels made on read: each box is filled with a value of its origin (no storage)."""

    axes = "xyz"
    num_channels = 1
    dtype = np.dtype("uint8")
    hints = SourceHints(resolution=(8.0, 8.0, 8.0))

    def __init__(self, shape_xyz: tuple[int, int, int]) -> None:
        self.shape_xyz = tuple(int(s) for s in shape_xyz)
        self.url = "synthetic://{}x{}x{}".format(*self.shape_xyz)

    def read_native(self, start_xyz: Any, stop_xyz: Any) -> np.ndarray:
        shape = tuple(b - a for a, b in zip(start_xyz, stop_xyz, strict=True))
        return np.full(shape, 1 + sum(start_xyz) % 251, dtype=self.dtype)

    def read(self, start_xyz: Any, stop_xyz: Any) -> np.ndarray:
        return self.read_native(start_xyz, stop_xyz)[..., np.newaxis]

    def identity(self) -> dict[str, Any]:
        return {"url": self.url}

    def __repr__(self) -> str:
        return f"SyntheticSource({self.shape_xyz})"


class _Discarded:
    """A write-only file that counts what it is given and keeps none of it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.size += n
        return n

    def close(self) -> None:
        pass

    def __enter__(self) -> _Discarded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DiscardFileSystem(LocalFileSystem):
    """`discard://PATH`: a local folder that keeps control objects and discards shards."""

    protocol = ("discard",)
    exclusive_create = True  # pipe_file(mode="create") below is exclusive (O_EXCL)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, auto_mkdir=True, **kwargs)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("discard://"):
            path = path[len("discard://") :]
        return super()._strip_protocol(path)

    def pipe_file(self, path: Any, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if mode != "create":
            super().pipe_file(path, value, mode=mode, **kwargs)
            return
        local = self._strip_protocol(path)
        self.makedirs(self._parent(local), exist_ok=True)
        descriptor = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(descriptor, "wb") as out:
            out.write(value)

    def open(self, path: Any, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and _discarded(str(path)):
            return _Discarded()
        return super().open(path, mode, *args, **kwargs)


def _discarded(path: str) -> bool:
    parts = path.split("/")
    return ".shardwright" not in parts and parts[-1] not in KEPT_NAMES


fsspec.register_implementation("discard", DiscardFileSystem, clobber=True)
