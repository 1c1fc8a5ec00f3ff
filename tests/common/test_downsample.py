"""The pyramid reductions (`shardwright.common.downsample`) on their own: every method against a
straightforward per-block NumPy reference written from the module's docstring (any voxel type,
odd sizes, partial edge blocks, slab by slab), the mode rules and the exact average by hand,
the C kernels against the NumPy path, and CuPy's bytes against NumPy's. The pyramid jobs that
chain these levels are tested end to end in tests/e2e/test_pyramids.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardwright.common import downsample
from tests.support.downsampling_reference import reference

# -- reductions vs the reference -------------------------------------------------------------------
FACTORS = [(2, 2, 2), (2, 2, 1), (3, 1, 2), (1, 1, 2)]


@st.composite
def volume_arrays(draw: Any, dtypes: list[str], alphabet: bool = False) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = (*draw(st.tuples(*[st.integers(1, 9)] * 3)), draw(st.integers(1, 2)))
    if alphabet:  # few distinct values (zero among them): ties and majorities of zero
        info = np.iinfo(dtype) if dtype.kind in "ui" else None
        top = int(info.max) if info else 1e30
        elements: Any = st.sampled_from([0, 1, 2, 3, top])
    elif dtype.kind == "f":
        elements = st.floats(-(2.0**100), 2.0**100, width=32)
    else:
        elements = None
    vol = draw(hnp.arrays(dtype, shape, elements=elements))
    return np.asfortranarray(vol) if draw(st.booleans()) else vol


@pytest.mark.parametrize("method", ["average", "min", "max", "striding"])
@given(
    vol=volume_arrays(["uint8", "uint16", "uint64", "int8", "int64", "float32"]),
    factor=st.sampled_from(FACTORS),
    slab=st.sampled_from([None, 1]),
)
def test_reductions_match_the_reference(
    method: str, vol: np.ndarray, factor: tuple[int, int, int], slab: int | None
) -> None:
    got = downsample.downsample(np, vol, factor, method, max_slab_bytes=slab)
    want = reference(vol, factor, method)
    assert got.dtype == vol.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", downsample.MODES)
@given(
    vol=volume_arrays(["uint8", "uint16", "uint32", "uint64", "int16"], alphabet=True),
    factor=st.sampled_from([*FACTORS, (1, 2, 2), (2, 1, 2), (4, 4, 4), (5, 5, 3)]),
    slab=st.sampled_from([None, 1]),
)
def test_modes_match_the_reference(
    method: str, vol: np.ndarray, factor: tuple[int, int, int], slab: int | None
) -> None:
    got = downsample.downsample(np, vol, factor, method, max_slab_bytes=slab)
    np.testing.assert_array_equal(got, reference(vol, factor, method))


def test_the_c_reductions_are_built() -> None:
    """CI builds `_reduce` (setup.py); without it pyramids fall back to NumPy, slower."""
    assert downsample._reduce is not None


INTEGER_TYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


@given(
    dtype=st.sampled_from(INTEGER_TYPES),
    shape=st.tuples(st.integers(1, 21), st.integers(1, 13), st.integers(1, 11), st.integers(1, 2)),
    factor=st.sampled_from([*FACTORS, (1, 2, 2), (2, 1, 2), (4, 4, 4), (3, 3, 3), (1, 1, 1)]),
    alphabet=st.integers(2, 300),
    view=st.sampled_from(["F", "C", "transposed", "strided"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_reductions_equal_numpys(
    monkeypatch: pytest.MonkeyPatch,
    dtype: str,
    shape: tuple[int, int, int, int],
    factor: tuple[int, int, int],
    alphabet: int,
    view: str,
    seed: int,
) -> None:
    """Every integer type, odd sizes, partial edge blocks, any memory layout: the C kernels
    give NumPy's values (small alphabets make ties and uniform blocks common)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    pool = rng.integers(info.min, info.max, size=alphabet, dtype=dtype, endpoint=True)
    pool[: alphabet // 3] = 0
    vol = rng.choice(pool, size=shape)
    if view == "F":
        vol = np.asfortranarray(vol)
    elif view == "transposed":  # as a C-order z, y, x source reads: x fastest
        vol = np.ascontiguousarray(vol.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0)
    elif view == "strided":
        vol = np.repeat(vol, 2, axis=0)[::2]
    for method in ("average", *downsample.MODES):
        with_c = downsample.downsample(np, vol, factor, method)
        with monkeypatch.context() as patched:
            patched.setattr(downsample, "_reduce", None)
            with_numpy = downsample.downsample(np, vol, factor, method)
        assert with_c.dtype == with_numpy.dtype == vol.dtype
        np.testing.assert_array_equal(with_c, with_numpy, err_msg=method)


@pytest.mark.parametrize("method", downsample.MODES)
@given(vol=volume_arrays(["float32"]), factor=st.sampled_from(FACTORS))
def test_modes_of_floats_match_the_reference(
    method: str, vol: np.ndarray, factor: tuple[int, int, int]
) -> None:
    """Float labels compare as bit patterns: a NaN is a label, -0.0 is not 0.0."""
    got = downsample.downsample(np, vol, factor, method)
    assert got.tobytes() == reference(vol, factor, method).tobytes()


def _block(values: list[int], dtype: str = "uint64", shape: tuple[int, ...] = (2, 2, 2)) -> Any:
    """Values as one block [x, y, z, 1], listed x fastest (the order ties are broken in)."""
    return np.array(values, dtype=dtype).reshape(*shape, 1, order="F")


@pytest.mark.parametrize(
    ("values", "plain", "nonzero"),
    [
        ([0] * 7 + [9], 0, 9),  # 7 zeros and 1 label: background is the majority
        ([0, 0, 0, 0, 0, 7, 7, 9], 0, 7),
        ([0] * 8, 0, 0),  # zero only when the block is all zero
        ([0] * 7 + [2**64 - 1], 0, 2**64 - 1),
        ([5, 5, 3, 3, 0, 0, 0, 0], 0, 5),  # 5 and 3 tie: the one met first, not the smaller
        ([0, 0, 0, 0, 6, 6, 6, 6], 0, 6),  # 0 and 6 tie at four: 0 is met first
        ([4, 4, 4, 1, 1, 2, 2, 2], 4, 4),  # 4 and 2 tie at three: 4 is met first
        ([8, 7, 6, 5, 4, 3, 2, 1], 8, 8),  # all different: the first
    ],
)
def test_mode_rules_of_a_cube(values: list[int], plain: int, nonzero: int) -> None:
    block = _block(values)
    assert downsample.downsample(np, block, (2, 2, 2), "mode").item() == plain
    assert downsample.downsample(np, block, (2, 2, 2), "mode-nonzero").item() == nonzero


@pytest.mark.parametrize(
    ("values", "plain", "nonzero"),
    [  # a, then one along x, one along y, then d: COUNTLESS, as tinybrain at 2,2,1
        ([1, 2, 3, 4], 4, 4),  # all different: d
        ([1, 2, 2, 1], 2, 2),  # two pairs: the pair among the first three, not d's
        ([0, 3, 0, 3], 0, 3),
        ([0, 1, 2, 0], 0, 2),  # d is zero: the first non-zero of a, b (along y), c
        ([0, 0, 0, 0], 0, 0),
    ],
)
def test_mode_rules_of_a_square(values: list[int], plain: int, nonzero: int) -> None:
    block = _block(values, shape=(2, 2, 1))
    assert downsample.downsample(np, block, (2, 2, 1), "mode").item() == plain
    assert downsample.downsample(np, block, (2, 2, 1), "mode-nonzero").item() == nonzero


def test_average_rounds_half_up_exactly() -> None:
    assert downsample.downsample(np, _block([1, 2] * 4, "uint8"), (2, 2, 2), "average").item() == 2
    assert (
        downsample.downsample(np, _block([-1, -2] * 4, "int8"), (2, 2, 2), "average").item() == -1
    )
    top = _block([2**64 - 1] * 7 + [2**64 - 2])  # the sum overflows any uint64 accumulator
    assert downsample.downsample(np, top, (2, 2, 2), "average").item() == 2**64 - 1
    low = _block([-(2**63)] * 8, "int64")
    assert downsample.downsample(np, low, (2, 2, 2), "average").item() == -(2**63)


def test_partial_edge_blocks_reduce_over_their_real_voxels() -> None:
    vol = np.arange(3 * 1 * 1, dtype=np.uint8).reshape(3, 1, 1, 1) * 10  # x = 0, 10, 20
    assert downsample.downsample(np, vol, (2, 1, 1), "average").ravel().tolist() == [5, 20]
    assert downsample.downsample(np, vol, (2, 1, 1), "mode").ravel().tolist() == [0, 20]
    assert downsample.downsample(np, vol, (2, 1, 1), "mode-nonzero").ravel().tolist() == [10, 20]


@pytest.mark.gpu
@pytest.mark.parametrize("method", downsample.METHODS)
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint64", "float32"])
def test_cupy_reductions_are_byte_identical(method: str, dtype: str) -> None:
    import cupy

    rng = np.random.default_rng(7)
    vol = rng.integers(0, 6, (33, 20, 17, 1)).astype(dtype)
    if dtype == "float32":
        vol = rng.normal(0, 100, vol.shape).astype(dtype)
    for factor in [(2, 2, 2), (2, 2, 1)]:
        want = downsample.downsample(np, vol, factor, method)
        got = downsample.downsample(cupy, cupy.asarray(vol), factor, method).get()
        assert got.tobytes() == want.tobytes()


def test_the_factor_between_two_levels_is_whole_or_none() -> None:
    """A pyramid's own step, read from two levels' voxel sizes (x, y, z)."""
    assert downsample.factor_between([8, 8, 40], [16, 16, 40]) == (2, 2, 1)
    assert downsample.factor_between([0.5, 0.5, 2.0], [1.5, 1.5, 2.0]) == (3, 3, 1)
    for finer, coarser in [
        ([8, 8, 40], [8, 8, 40]),  # no step
        ([8, 8, 40], [12, 12, 40]),  # not whole
        ([16, 16, 40], [8, 8, 40]),  # finer, not coarser
        ([8, 8, 0], [16, 16, 40]),  # no size
        ([8, 8], [16, 16]),  # not x, y, z
    ]:
        assert downsample.factor_between(finer, coarser) is None, (finer, coarser)
