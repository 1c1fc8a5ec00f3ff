"""verify's voxel comparison (`verification/compare.py`) on its own: which chunks it reads
(every one, or a seeded sample that is the same on every run), what counts as a difference
(a NaN equals a NaN, complex voxels part by part), and what a differing, missing or
unreadable chunk is reported as, on real sources read through shardwright's readers."""

from __future__ import annotations

import itertools
import pathlib

import numpy as np
import pytest

from shardwright.sources import Source, open_source
from shardwright.verification.compare import (
    SourceComparer,
    chunk_boxes,
    compare_chunks,
    decode_chunks,
    differing,
    same_size,
)
from shardwright.verification.report import VerifyReport


def test_every_chunk_box_tiles_the_level_once_edges_clipped() -> None:
    size, chunk = (10, 7, 5), (4, 4, 4)
    covered = np.zeros(size, np.int8)
    boxes = list(chunk_boxes(size, chunk, full=True, sample=1))
    for coord, start, stop in boxes:
        assert start == tuple(g * c for g, c in zip(coord, chunk, strict=True))
        covered[tuple(slice(a, b) for a, b in zip(start, stop, strict=True))] += 1
    assert len(boxes) == 3 * 2 * 2 and (covered == 1).all()


def test_a_sample_is_that_many_distinct_chunks_the_same_every_run() -> None:
    size, chunk = (64, 64, 64), (8, 8, 8)
    first = [coord for coord, _, _ in chunk_boxes(size, chunk, full=False, sample=20)]
    again = [coord for coord, _, _ in chunk_boxes(size, chunk, full=False, sample=20)]
    assert first == again and len(set(first)) == 20
    assert len(list(chunk_boxes(size, chunk, full=False, sample=10_000))) == 8**3


def test_a_nan_equals_a_nan_and_complex_voxels_differ_part_by_part() -> None:
    got = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    want = np.array([np.nan, 1.0, 3.0, 2.5], np.float32)
    assert differing(got, want).tolist() == [False, False, True, True]
    z = np.array([1 + 2j, 1 + 2j, complex(np.nan, 1)], np.complex64)
    w = np.array([1 + 2j, 1 + 3j, complex(np.nan, 1)], np.complex64)
    assert differing(z, w).tolist() == [False, True, False]
    assert not differing(np.arange(5), np.arange(5)).any()


def _source(tmp_path: pathlib.Path, name: str, voxels: np.ndarray) -> Source:
    path = tmp_path / f"{name}.npy"
    np.save(path, voxels)
    return open_source(str(path), axes="xyz")


@pytest.fixture
def volume() -> np.ndarray:
    rng = np.random.default_rng(5)
    return rng.integers(1, 9, (20, 12, 6), dtype=np.uint16)


def test_the_same_voxels_compare_clean_and_one_changed_voxel_is_named(
    tmp_path: pathlib.Path, volume: np.ndarray
) -> None:
    source = _source(tmp_path, "source", volume)
    same = VerifyReport("out", "precomputed")
    compare_chunks(same, source, SourceComparer(_source(tmp_path, "same", volume), (8, 8, 8)),
                   full=True, sample=0)  # fmt: skip
    assert same.ok and same.chunks_compared == 3 * 2 * 1 and same.nonzero_compared
    changed = volume.copy()
    changed[17, 9, 4] = 0
    report = VerifyReport("out", "precomputed")
    comparer = SourceComparer(_source(tmp_path, "changed", changed), (8, 8, 8))
    compare_chunks(report, source, comparer, full=True, sample=0)
    assert report.problems == [
        f"chunk (2, 1, 0) (shard none: not sharded): 1 of {4 * 4 * 6} voxels differ from the "
        f"source (first at (1, 1, 4, 0): 0 instead of {volume[17, 9, 4]})"
    ]


def test_a_level_of_another_size_is_one_problem_naming_the_scale_flag(
    tmp_path: pathlib.Path, volume: np.ndarray
) -> None:
    source = _source(tmp_path, "source", volume)
    report = VerifyReport("out", "precomputed")
    assert same_size(report, source, (20, 12, 6), "src", None)
    assert not same_size(report, source, (10, 6, 6), "src", "2", recorded="8_8_40")
    (problem,) = report.problems
    assert "at its scale 2 it is 20 x 12 x 6 voxels" in problem
    assert problem.endswith("pass --source-scale 8_8_40")


class _Unreadable(SourceComparer):
    """A stored level one of whose chunks cannot be decoded (as a torn shard's would not)."""

    def read_chunk(self, coord: tuple[int, int, int], shape_xyz: tuple[int, ...]) -> np.ndarray:
        if coord == (1, 0, 0):
            raise ValueError("compressed_segmentation: block header out of range")
        return super().read_chunk(coord, shape_xyz)


def test_a_chunk_that_cannot_be_decoded_is_one_problem_and_the_rest_are_read(
    tmp_path: pathlib.Path, volume: np.ndarray
) -> None:
    level = _source(tmp_path, "level", volume)
    report = VerifyReport("out", "precomputed")
    decode_chunks(report, _Unreadable(level, (8, 8, 8)), full=True, sample=0)
    assert report.chunks_decoded == 5
    assert report.problems == [
        "chunk (1, 0, 0) (shard none: not sharded): cannot be decoded (ValueError: "
        "compressed_segmentation: block header out of range)"
    ]
    compared = VerifyReport("out", "precomputed")
    compare_chunks(compared, level, _Unreadable(level, (8, 8, 8)), full=True, sample=0)
    assert compared.chunks_compared == 6 and len(compared.problems) == 1


def test_every_box_of_a_sample_is_read_from_the_source_where_it_lies(
    tmp_path: pathlib.Path, volume: np.ndarray
) -> None:
    """The boxes the comparison reads are the chunks' own: a volume whose every voxel holds
    its position compares clean only if each box is read where it lies."""
    positions = np.zeros((20, 12, 6), np.uint32)
    for x, y, z in itertools.product(range(20), range(12), range(6)):
        positions[x, y, z] = x * 10_000 + y * 100 + z
    source = _source(tmp_path, "positions", positions)
    report = VerifyReport("out", "precomputed")
    compare_chunks(report, source, SourceComparer(source, (8, 8, 8)), full=False, sample=4)
    assert report.ok and report.chunks_compared == 4
