"""Test volumes, defined once: the generators every test module draws its sources from.

Each is deterministic (seeded or closed-form) and small enough for a 2-core machine. Arrays are
C-order `z, y, x` (`c, z, y, x` with channels) as sources are read, unless a name says `xyzc`.
"""

from __future__ import annotations

import pathlib

import numpy as np


def noise(shape: tuple[int, ...], seed: int, high: int = 255, dtype: str = "uint8") -> np.ndarray:
    """Uniform integers in [0, high): incompressible voxels, every byte counts."""
    return np.random.default_rng(seed).integers(0, high, shape, dtype=np.dtype(dtype))


def saved(directory: pathlib.Path, name: str, volume: np.ndarray) -> str:
    """`volume` written as DIRECTORY/NAME.npy; returns the path a conversion takes."""
    path = directory / f"{name}.npy"
    np.save(path, volume)
    return str(path)


def full_range(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random voxels spanning the dtype's range where it is small, so byte order matters."""
    rng = np.random.default_rng(seed)
    native = np.dtype(dtype).newbyteorder("=")
    if native.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dtype)
    high = min(int(np.iinfo(native).max), 2**62)
    return rng.integers(0, high, shape, dtype=native, endpoint=True).astype(dtype)
