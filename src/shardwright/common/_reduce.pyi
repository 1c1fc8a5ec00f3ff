"""Types of the C pyramid reductions in _reduce.c."""

import numpy as np

def average(block_xyzc: np.ndarray, out_xyzc: np.ndarray, factor: tuple[int, int, int], /) -> None:
    """Block means rounded half up of 1-, 2- or 4-byte integers, written into `out_xyzc`."""

def mode(block_xyzc: np.ndarray, out_xyzc: np.ndarray, factor: tuple[int, int, int], /) -> None:
    """Most frequent value of each block (tinybrain's ties), written into `out_xyzc`."""

def mode_nonzero(
    block_xyzc: np.ndarray, out_xyzc: np.ndarray, factor: tuple[int, int, int], /
) -> None:
    """Most frequent non-zero value of each block (zero if all are), into `out_xyzc`."""
