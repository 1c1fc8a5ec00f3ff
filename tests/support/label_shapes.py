"""The label volumes the generation tests mesh, written as precomputed segmentations by
CloudVolume (as labs hold them): overlapping shapes and a tube crossing many blocks
(`labels`); objects of one voxel, thin lines and small cubes (`tiny_objects`); blobs, one
of them around the line four blocks share (`blobs`)."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

SHAPE = (128, 96, 64)  # x, y, z voxels
RESOLUTION = (8, 8, 16)  # nm
SEGMENTS = {
    "ball": 11,
    "overlapping_ball": 12,  # cuts into the first ball: they share a surface
    "box": 2**40 + 7,  # a large id, flat faces
    "tube": 31,  # along x through every block, closed where it meets the dataset's edges
    "bent": 77,  # an L: two arms meeting at a corner, crossing block borders
}


def labels() -> np.ndarray:
    """The volume, indexed [x, y, z]."""
    x, y, z = np.meshgrid(*(np.arange(n) for n in SHAPE), indexing="ij")
    out = np.zeros(SHAPE, np.uint64)
    out[(x - 40) ** 2 + (y - 40) ** 2 + ((z - 30) * 2) ** 2 < 24**2] = SEGMENTS["ball"]
    out[(x - 64) ** 2 + (y - 48) ** 2 + ((z - 34) * 2) ** 2 < 20**2] = SEGMENTS["overlapping_ball"]
    out[(abs(x - 100) < 12) & (abs(y - 20) < 9) & (abs(z - 50) < 8)] = SEGMENTS["box"]
    out[(y - 80) ** 2 + ((z - 12) * 2) ** 2 < 5**2] = SEGMENTS["tube"]
    arm_x = (x >= 70) & (x < 120) & ((y - 70) ** 2 + ((z - 52) * 2) ** 2 < 4**2)
    arm_y = (y >= 40) & (y <= 70) & ((x - 119) ** 2 + ((z - 52) * 2) ** 2 < 4**2)
    out[arm_x | arm_y] = SEGMENTS["bent"]
    return out


TINY_SHAPE, TINY_RESOLUTION = (32, 32, 10), (4, 4, 40)  # the user's voxel size
LINE, CUBE, CROSSING_LINE = 9001, 9002, 9003


def tiny_objects() -> np.ndarray:
    """One-voxel objects (ids 1, 2, ...) on every other voxel of a corner, some on the low
    face of the blocks of 16 x 16 x 4 voxels that follow; a 1 x 1 x 7 line, a 2 x 2 x 2 cube
    and a line across a block border. None touches the dataset's edges."""
    out = np.zeros(TINY_SHAPE, np.uint64)
    points = [(x, y, z) for x in range(2, 19, 2) for y in range(2, 12, 3) for z in (1, 4, 6)]
    for segment, point in enumerate(points, start=1):
        out[point] = segment
    out[24, 20, 1:8] = LINE
    out[20:22, 24:26, 3:5] = CUBE
    out[12:20, 28, 2] = CROSSING_LINE
    return out


BLOB_SHAPE, BLOB_RESOLUTION = (64, 64, 32), (8, 8, 16)
BLOBS = {  # id: centre (voxels), radius (voxels along x; z counts double)
    7: ((31.5, 31.5, 16.0), 10.0),  # around the line the four blocks of 32^3 share
    8: ((12.0, 12.0, 10.0), 7.0),
    9: ((50.0, 14.0, 18.0), 9.0),  # across one block border
    10: ((14.0, 48.0, 20.0), 8.0),
    11: ((48.0, 50.0, 12.0), 6.0),
}


def blobs() -> np.ndarray:
    """Ellipsoidal blobs (BLOBS) in BLOB_SHAPE."""
    x, y, z = np.meshgrid(*(np.arange(n) for n in BLOB_SHAPE), indexing="ij")
    out = np.zeros(BLOB_SHAPE, np.uint64)
    for segment, ((cx, cy, cz), radius) in BLOBS.items():
        out[(x - cx) ** 2 + (y - cy) ** 2 + ((z - cz) * 2) ** 2 < radius**2] = segment
    return out


def write_precomputed(
    path: pathlib.Path,
    volume: np.ndarray | None = None,
    resolution: tuple[int, int, int] = RESOLUTION,
    chunk: tuple[int, int, int] = (32, 32, 32),
    *,
    layer_type: str = "segmentation",
    encoding: str = "compressed_segmentation",
    voxel_offset: tuple[int, int, int] = (0, 0, 0),
    sharding: dict[str, Any] | None = None,
) -> str:
    """A volume (default `labels()`, indexed x, y, z) as a precomputed volume written by
    CloudVolume (default an unsharded compressed_segmentation segmentation; with `sharding`,
    a sharding spec whose one shard holds the whole volume, its shard made by CloudVolume's
    `make_shard`, as Igneous's sharded tasks make theirs)."""
    from cloudvolume import CloudVolume

    data = labels() if volume is None else volume
    url = f"file://{path}"
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type=layer_type,
        data_type=str(data.dtype),
        encoding=encoding,
        resolution=list(resolution),
        voxel_offset=list(voxel_offset),
        chunk_size=list(chunk),
        volume_size=list(data.shape),
    )
    if sharding is not None:
        info["scales"][0]["sharding"] = sharding
    written = CloudVolume(url, info=info, progress=False)
    written.commit_info()
    written[:, :, :] = data if sharding is None else data[..., np.newaxis]  # make_shard: x y z c
    return url
