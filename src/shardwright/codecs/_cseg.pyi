"""Types of the C encoder in _cseg.c."""

import numpy as np

def compress(labels_xyzc: np.ndarray, block_size: tuple[int, int, int], /) -> bytes:
    """The compressed_segmentation stream of a 4-D [x, y, z, c] uint32/uint64 array."""
