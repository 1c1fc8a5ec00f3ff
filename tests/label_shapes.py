"""The label volume the generation tests mesh: overlapping shapes and a tube crossing many
blocks, written as a precomputed segmentation by CloudVolume (as labs hold them)."""

from __future__ import annotations

import pathlib

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


def write_precomputed(path: pathlib.Path) -> str:
    """The volume as an unsharded precomputed segmentation (CloudVolume), 32^3 chunks."""
    from cloudvolume import CloudVolume

    url = f"file://{path}"
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type="segmentation",
        data_type="uint64",
        encoding="compressed_segmentation",
        resolution=list(RESOLUTION),
        voxel_offset=[0, 0, 0],
        chunk_size=[32, 32, 32],
        volume_size=list(SHAPE),
    )
    volume = CloudVolume(url, info=info, progress=False)
    volume.commit_info()
    volume[:, :, :] = labels()
    return url
