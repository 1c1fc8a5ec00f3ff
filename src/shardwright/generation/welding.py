"""Equal positions made one: the step that joins pieces made apart (blocks' surfaces and
skeletons meet at vertices with bit-identical coordinates on their shared planes)."""

from __future__ import annotations

import numpy as np


def unique_positions(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of `points` [n, 3] float32 or float64, each row's index among them).

    Rows are compared by their bits after adding +0.0 (so -0.0 and 0.0 are one), sorted with
    one lexsort: about eight times faster than `np.unique(axis=0)`, which compares rows as
    structured records."""
    points = np.ascontiguousarray(points)
    unsigned = np.uint32 if points.dtype == np.float32 else np.uint64
    bits = (points + points.dtype.type(0)).view(unsigned)
    order = np.lexsort((bits[:, 2], bits[:, 1], bits[:, 0]))
    ordered = bits[order]
    first = np.ones(len(order), bool)
    first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return points[order[first]], inverse
