"""`verify --full` says how close generated skeletons are to one whole TEASAR pass: for a
sample of segments, the stored skeleton's cable against kimimaro's on the segment's own
cutout, as a number a lab can read (the median ratio, how many are off, the worst)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from shardwright import api
from shardwright.verification import skeleton_quality
from tests.support import label_shapes

pytest.importorskip("kimimaro")


def test_cable_length_sums_the_edges() -> None:
    vertices = np.array([[0, 0, 0], [3, 4, 0], [3, 4, 12]], np.float64)
    assert skeleton_quality.cable_length(vertices, np.array([[0, 1], [1, 2]])) == 17.0
    assert skeleton_quality.cable_length(vertices, np.zeros((0, 2), np.int64)) == 0.0


def test_the_summary_names_the_median_and_the_segments_off() -> None:
    said = skeleton_quality.summary({1: 1.0, 2: 1.1, 3: 0.5, 4: 2.0}, 1)
    assert said.startswith("skeleton cable against one TEASAR pass on each segment's cutout, "
                           "4 segments: median ratio 1.050, 2 more than 15% off")  # fmt: skip
    assert "(segment 4: 2.00, segment 3: 0.50)" in said and "1 not compared" in said
    assert "none compared (2 too large or empty)" in skeleton_quality.summary({}, 2)


def test_verify_full_measures_generated_skeletons_against_one_pass(
    tmp_path: pathlib.Path,
) -> None:
    """The five shapes of label_shapes (balls, a box, a tube across every block, an L), made
    in blocks of 32^3: the report gives every segment's ratio (their median near 1), and the
    ratio it names for a segment is CloudVolume's reading of the stored skeleton against
    kimimaro's TEASAR of that segment's cutout (the balls cut by block faces are longer: issue
    56's work)."""
    source = label_shapes.write_precomputed(tmp_path / "labels")
    dest = tmp_path / "out"
    api.convert(source, str(dest), generate_skeletons=True, mesh_block=(32, 32, 32),
                scheduler="sync", progress=False)  # fmt: skip
    report = api.verify(f"{dest}/skeletons", full=True)
    assert report.ok, report.problems
    (note,) = [n for n in report.notes if n.startswith("skeleton cable against")]
    found = re.search(r"(\d+) segments: median ratio ([\d.]+), (\d+) more than 15% off", note)
    assert found is not None, note
    compared, median, off = int(found[1]), float(found[2]), int(found[3])
    assert compared == len(label_shapes.SEGMENTS) and 0.85 <= median <= 1.15, note
    named = re.findall(r"segment (\d+): ([\d.]+)", note)
    assert len(named) == min(off, 3)
    for segment, ratio in named:
        assert abs(float(ratio) - _ratio(str(dest), int(segment))) < 0.01, note
    quick = api.verify(f"{dest}/skeletons")  # without --full: the census, no tracing
    assert not any(n.startswith("skeleton cable") for n in quick.notes)


def _ratio(dest: str, segment: int) -> float:
    """The stored skeleton's cable (read by CloudVolume) over kimimaro's on the segment's
    box and one voxel around it, of the labels as written."""
    import kimimaro
    from cloudvolume import CloudVolume

    from shardwright.generation.tracing import Tracing

    skeleton = CloudVolume(f"file://{dest}", progress=False).skeleton.get(segment)
    ours = skeleton_quality.cable_length(np.asarray(skeleton.vertices, np.float64),
                                         np.asarray(skeleton.edges))  # fmt: skip
    labels = label_shapes.labels()
    where = np.argwhere(labels == segment)
    low, high = np.maximum(where.min(axis=0) - 1, 0), where.max(axis=0) + 2
    cutout = labels[low[0] : high[0], low[1] : high[1], low[2] : high[2]] == segment
    (found,) = kimimaro.skeletonize(
        np.asfortranarray(cutout.astype(np.uint8)), teasar_params=Tracing().params(),
        anisotropy=label_shapes.RESOLUTION, dust_threshold=0, fix_branching=True,
        progress=False,
    ).values()  # fmt: skip
    return ours / skeleton_quality.cable_length(np.asarray(found.vertices), found.edges)
