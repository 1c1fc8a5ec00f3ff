"""Test volumes, defined once: the generators every test module draws its sources from.

Each is deterministic (seeded or closed-form) and small enough for a 2-core machine. Arrays are
C-order `z, y, x` (`c, z, y, x` with channels) as sources are read, unless a name says `xyzc`.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np


def noise(shape: tuple[int, ...], seed: int, high: int = 255, dtype: str = "uint8") -> np.ndarray:
    """Uniform integers in [0, high): incompressible voxels, every byte counts."""
    return np.random.default_rng(seed).integers(0, high, shape, dtype=np.dtype(dtype))


def saved(directory: pathlib.Path, name: str, volume: np.ndarray) -> str:
    """`volume` written as DIRECTORY/NAME.npy; returns the path a conversion takes."""
    path = directory / f"{name}.npy"
    np.save(path, volume)
    return str(path)


def saved_noise(
    directory: pathlib.Path, name: str, shape: tuple[int, int, int], seed: int, slab: int = 32
) -> str:
    """uint8 noise in [0, 255) (as `noise` draws it, `slab` z-planes at a time) written into
    DIRECTORY/NAME.npy through a memory map, so that no more than one slab is in memory: for
    tests of a task's peak memory. Returns the path a conversion takes."""
    rng = np.random.default_rng(seed)
    path = directory / f"{name}.npy"
    volume = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
    for z in range(0, shape[0], slab):
        planes = min(slab, shape[0] - z)
        volume[z : z + planes] = rng.integers(0, 255, (planes, *shape[1:]), dtype=np.uint8)
    volume.flush()
    del volume
    return str(path)


def full_range(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random voxels spanning the dtype's range where it is small, so byte order matters."""
    rng = np.random.default_rng(seed)
    native = np.dtype(dtype).newbyteorder("=")
    if native.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dtype)
    high = min(int(np.iinfo(native).max), 2**62)
    return rng.integers(0, high, shape, dtype=native, endpoint=True).astype(dtype)


def em_like_uint8(shape: tuple[int, ...], seed: int = 0, noise: float = 8.0) -> np.ndarray:
    """uint8 with EM-like slow variation plus noise (noise=0: what jpeg keeps well)."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    smooth = 120 + 40 * np.sin(grids[0] / 5.0) + 30 * np.cos(grids[1] / 7.0) + 10 * grids[2] % 40
    return np.clip(smooth + rng.normal(0, noise, shape), 0, 255).astype(np.uint8)


def codec_chunk_xyzc(shape: tuple[int, int, int, int], dtype: str, seed: int = 0) -> np.ndarray:
    """An [x, y, z, c] chunk: blocky labels (with values near the top of the range) for
    uint32/uint64, EM-like uint8, varied values otherwise."""
    rng = np.random.default_rng(seed)
    if dtype in ("uint32", "uint64"):
        big = np.iinfo(dtype).max
        table = np.array([0, 1, 7, big, big - 3, 2**31 + 5], dtype=dtype)
        coarse = rng.integers(0, len(table), (*(-(-n // 3) for n in shape[:3]), shape[3]))
        labels = table[coarse].repeat(3, 0).repeat(3, 1).repeat(3, 2)
        return np.ascontiguousarray(labels[: shape[0], : shape[1], : shape[2]])
    if dtype == "uint8":
        return em_like_uint8(shape, seed)
    if dtype == "float32":
        return rng.normal(0, 1e3, shape).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def layer_xyzc(dtype: str, channels: int, layer: str, size: tuple[int, int, int]) -> np.ndarray:
    """An [x, y, z, c] volume of a layer type: few labels (one near the top of the range) for
    segmentations, a gradient per channel for images, noise for float32."""
    rng = np.random.default_rng(sum(size))
    shape = (*size, channels)
    if layer == "segmentation":
        labels = rng.integers(0, 6, shape).astype(dtype)
        labels[labels == 5] = np.iinfo(dtype).max - 3
        return labels
    if dtype == "float32":
        return rng.standard_normal(shape).astype(np.float32)
    x, y, z = np.meshgrid(*(np.arange(n) for n in size), indexing="ij")
    smooth = (x * 3 + y * 5 + z * 7)[..., None] + np.arange(channels) * 40
    return np.clip(smooth, 0, np.iinfo(dtype).max).astype(dtype)


def with_fill_regions(shape: tuple[int, ...], dtype: str, fill: float, seed: int = 0) -> np.ndarray:
    """Random voxels (the dtype's maximum included) with `fill` over [8:, :4, :4] and
    [:4, 4:6, 4:6]: with tests/formats/zarr3/test_zarr3.py's grids, one shard entirely fill (never
    written) and one all-fill inner chunk inside a written shard."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        src = rng.standard_normal(shape).astype(dt)
    else:
        src = rng.integers(0, min(np.iinfo(dt).max, 2**40), size=shape, dtype=np.uint64)
        src = src.astype(dt)
        src[0, 0, :3] = np.iinfo(dt).max
    src[8:, :4, :4] = fill
    src[:4, 4:6, 4:6] = fill
    return src


def smooth_image_zyx(
    size_xyz: tuple[int, int, int], dtype: str = "uint8", channels: int = 1, noise: float = 9
) -> Any:
    """C-order (z, y, x) or (c, z, y, x) image with structure and noise (its deviation)."""
    x, y, z = size_xyz
    rng = np.random.default_rng(3)
    zz, yy, xx = np.meshgrid(np.arange(z), np.arange(y), np.arange(x), indexing="ij")
    base = 100 + 60 * np.sin(xx / 4.0) * np.cos(yy / 5.0) + 3 * zz
    vol = np.stack([base + 20 * c for c in range(channels)]) + rng.normal(
        0, noise, (channels, *base.shape)
    )
    vol = np.clip(vol, 0, 250).astype(dtype)
    return vol if channels > 1 else vol[0]


def cell_labels_zyx(size_xyz: tuple[int, int, int], dtype: str = "uint64") -> np.ndarray:
    """C-order labels of small boxes, ids near the top of the range, every seventh box 0."""
    x, y, z = size_xyz
    zz, yy, xx = np.meshgrid(np.arange(z), np.arange(y), np.arange(x), indexing="ij")
    cells = (xx // 3) + 20 * (yy // 4) + 400 * (zz // 3)
    big = np.array(np.iinfo(dtype).max - 5000, dtype=dtype)
    return np.where(cells % 7 == 0, 0, big - cells.astype(dtype)).astype(dtype)


def noise_or_blocky_labels_zyx(
    kind: str, dtype: str, channels: bool, size_zyx: tuple[int, int, int]
) -> np.ndarray:
    """C-order (z, y, x), or (2, z, y, x) with `channels`: integers below 200, or for `kind`
    "labels" 5-voxel blocks of labels 0..5 with the first 20 z planes zero (zarr3 omits their
    chunks)."""
    rng = np.random.default_rng(7)
    shape = ((2,) if channels else ()) + size_zyx
    if kind == "labels":
        coarse = rng.integers(0, 6, tuple(-(-n // 5) for n in shape))
        labels = coarse.repeat(5, -1).repeat(5, -2).repeat(5, -3)[..., :52][..., :45, :][:37]
        labels = labels[..., : size_zyx[0], : size_zyx[1], : size_zyx[2]]
        labels[..., :20, :, :] = 0
        return labels.astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)


def saved_balls(path: pathlib.Path) -> str:
    """150 uint64 balls in 128 x 256 x 256 voxels (z, y, x) saved as `.npy` at `path`: 256
    blocks of 32^3, meshed in a few seconds here (long enough to stop a job in its blocks)."""
    rng = np.random.default_rng(7)
    shape = np.array((128, 256, 256))
    labels = np.zeros(shape, np.uint64)
    for segment in range(1, 151):
        centre, radius = rng.uniform(0, 1, 3) * shape, rng.uniform(5, 16)
        low = np.maximum(0, (centre - radius).astype(int))
        high = np.minimum(shape, (centre + radius + 1).astype(int))
        z, y, x = np.ogrid[low[0] : high[0], low[1] : high[1], low[2] : high[2]]
        ball = (z - centre[0]) ** 2 + (y - centre[1]) ** 2 + (x - centre[2]) ** 2 < radius**2
        labels[low[0] : high[0], low[1] : high[1], low[2] : high[2]][ball] = segment
    np.save(path, labels)
    return str(path)
