"""Equal positions made one: the distinct rows and each row's index, as NumPy's own
`unique(axis=0)` finds them, with -0.0 and 0.0 one position."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardwright.generation.welding import unique_positions


@given(
    points=hnp.arrays(st.sampled_from([np.float32, np.float64]),
                      st.tuples(st.integers(0, 40), st.just(3)),
                      elements=st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e30, 7.25])),
)  # fmt: skip
def test_unique_positions_are_numpys_unique_rows(points: np.ndarray) -> None:
    unique, inverse = unique_positions(points)
    want, want_inverse = np.unique(points + 0.0, axis=0, return_inverse=True)
    assert unique.dtype == points.dtype
    np.testing.assert_array_equal(unique[inverse], points)  # each row found again
    assert len(unique) == len(want)
    # the same partition of the rows (NumPy orders rows by value, this by bits)
    assert len(set(zip(inverse.tolist(), want_inverse.ravel().tolist(), strict=True))) == len(want)


def test_minus_zero_and_zero_are_one_position() -> None:
    points = np.array([[0.0, 1, 2], [-0.0, 1, 2], [0.0, 1, -2]], np.float32)
    unique, inverse = unique_positions(points)
    assert len(unique) == 2 and inverse[0] == inverse[1] != inverse[2]
