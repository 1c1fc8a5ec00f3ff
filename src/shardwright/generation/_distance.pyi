"""Types of TEASAR's distance field in _distance.c."""

import numpy as np

def distance_field(
    field: np.ndarray,
    source: tuple[int, int, int],
    voxel: tuple[float, float, float],
    free_space_radius: float,
    dist: np.ndarray,
    /,
) -> int:
    """dijkstra3d's euclidean_distance_field from `source` into `dist`; the farthest voxel."""
