"""verify's comparison of where a dataset another tool wrote sits against its source
(`verification/placement.check_foreign_placement`): voxel size and offset read as any
reader reads them (here the `info` of precomputed volumes), each compared where the source
records it, a difference one problem naming both values and where the expected one is
recorded, and what the source does not record a note."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from shardwright import api
from shardwright.sources import Source, open_source
from shardwright.verification.placement import check_foreign_placement
from shardwright.verification.report import VerifyReport


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("placement") / "v.npy"
    np.save(path, np.arange(16 * 16 * 8, dtype=np.uint8).reshape(8, 16, 16))
    return path


def _placed(volume: pathlib.Path, name: str, resolution: tuple, offset: tuple) -> Source:
    dest = volume.parent / name
    if not dest.exists():
        api.convert(str(volume), str(dest), resolution=resolution, voxel_offset=offset,
                    chunk_size=(16, 16, 8), scheduler="sync", progress=False)  # fmt: skip
    return open_source(str(dest))


def test_the_same_placement_is_no_problem(volume: pathlib.Path) -> None:
    report = VerifyReport("out", "precomputed")
    check_foreign_placement(report, _placed(volume, "a", (4, 4, 40), (10, 20, 3)),
                            _placed(volume, "a2", (4, 4, 40), (10, 20, 3)))  # fmt: skip
    assert report.ok and not report.notes


def test_another_voxel_size_and_offset_are_one_problem_each(volume: pathlib.Path) -> None:
    report = VerifyReport("out", "precomputed")
    source = _placed(volume, "a", (4, 4, 40), (10, 20, 3))
    check_foreign_placement(report, _placed(volume, "b", (8, 8, 40), (10, 20, 4)), source)
    recorded = f"the source's, from {source.hints.placed_by}"
    assert report.problems == [
        f"placement: the output's voxel size (nm) is 8,8,40, expected 4,4,40 ({recorded})",
        f"placement: the output's voxel offset is 10,20,4, expected 10,20,3 ({recorded})",
    ]


def test_what_the_source_does_not_record_is_a_note_not_a_problem(volume: pathlib.Path) -> None:
    report = VerifyReport("out", "precomputed")
    bare = open_source(str(volume), axes="zyx")  # a .npy records neither
    check_foreign_placement(report, _placed(volume, "a", (4, 4, 40), (10, 20, 3)), bare)
    assert report.ok
    assert report.notes == ["the source records no voxel size or voxel offset: not compared"]
