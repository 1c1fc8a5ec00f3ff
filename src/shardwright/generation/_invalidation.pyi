"""Types of TEASAR's rolling-ball invalidation in _invalidation.c."""

import numpy as np

def roll(
    field: np.ndarray,
    sources: np.ndarray,
    radii: np.ndarray,
    voxel: tuple[float, float, float],
    /,
) -> int:
    """Clear `field` (uint8, Fortran order) within each source's ball; the voxels cleared."""
