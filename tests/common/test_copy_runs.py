"""`copy_runs` and `contiguous`: the engine's strided copies moving whole rows, byte for byte
what NumPy's own copy gives, for every layout the engines hand them."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.common.arrays import contiguous, copy_runs


def _volume(dtype: str, shape: tuple[int, ...] = (20, 24, 40)) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.integers(0, 250, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["u1", "<u2", ">u2", "<i8", "<f4", ">f8", "bool", "c16"])
def test_a_chunk_cut_from_a_volume_is_its_elements(dtype: str) -> None:
    volume = _volume(dtype)
    region = volume[3:19, 5:21, 8:24]  # rows of 16 elements, contiguous along the last axis
    out = np.empty(region.shape, region.dtype)
    copy_runs(out, region)
    assert out.dtype == region.dtype
    assert out.tobytes() == np.ascontiguousarray(region).tobytes()


def test_an_edge_chunk_lands_in_the_corner_of_a_padded_buffer() -> None:
    volume = _volume("u1")
    region = volume[16:, 16:, 32:]  # 4 x 8 x 8 at the volume's far corner
    chunk = np.full((16, 16, 16), 9, np.uint8)
    copy_runs(chunk[:4, :8, :8], region)
    assert np.array_equal(chunk[:4, :8, :8], region)
    assert (chunk[4:] == 9).all() and (chunk[:, 8:] == 9).all() and (chunk[:, :, 8:] == 9).all()


@pytest.mark.parametrize(
    "view",
    [
        lambda v: v[:, :, ::2],  # last axis strided: no row to move whole
        lambda v: v.transpose(2, 1, 0),  # last axis the volume's slowest
        lambda v: v[:, :, :1],  # rows of one element
        lambda v: v[:, :, 5],  # two axes left, the last one strided
        lambda v: v[0, 0, :],  # one axis
    ],
)
def test_layouts_without_contiguous_rows_are_copied_all_the_same(view) -> None:
    region = view(_volume("<u2"))
    out = np.empty(region.shape, region.dtype)
    copy_runs(out, region)
    assert np.array_equal(out, region)


def test_a_different_element_type_is_converted_not_reinterpreted() -> None:
    region = _volume("u1")[:, :, 8:24]
    out = np.empty(region.shape, np.uint16)
    copy_runs(out, region)
    assert np.array_equal(out, region.astype(np.uint16))


def test_contiguous_copies_only_what_is_not_contiguous_already() -> None:
    volume = _volume("<u4")
    assert contiguous(np, volume) is volume
    lifted = volume.reshape(5, 4, 6, 4, 5, 8).transpose(0, 2, 4, 1, 3, 5)  # chunk-major
    copied = contiguous(np, lifted)
    assert copied.flags.c_contiguous and copied.dtype == volume.dtype
    assert np.array_equal(copied, lifted)


def test_a_read_only_memory_mapped_source_is_read_not_written(tmp_path) -> None:
    path = tmp_path / "volume.npy"
    np.save(path, _volume("u1"))
    mapped = np.load(path, mmap_mode="r")
    region = mapped[2:10, 4:12, 16:32]
    out = np.empty(region.shape, region.dtype)
    copy_runs(out, region)
    assert np.array_equal(out, region)
    assert np.array_equal(np.load(path), _volume("u1"))
