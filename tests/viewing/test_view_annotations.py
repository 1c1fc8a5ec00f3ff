"""An annotation collection in a view: an annotation layer placed by its info, and, beside a
segmentation, its relationships linked to that layer (selecting a segment filters its rows)."""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from shardwright import api
from shardwright.viewing.state import describe_all, viewer_state


def test_annotations_beside_a_segmentation_filter_by_its_segments(tmp_path: pathlib.Path) -> None:
    labels = np.random.default_rng(0).integers(1, 9, (16, 32, 32), dtype=np.uint64)
    np.save(tmp_path / "seg.npy", labels)
    api.convert(str(tmp_path / "seg.npy"), str(tmp_path / "seg"), resolution=(8, 8, 40),
                scheduler="sync", progress=False)  # fmt: skip
    points = pd.DataFrame({"x": [1.5, 20.0], "y": [2.0, 30.0], "z": [3.0, 10.0],
                           "pre": [1, 2], "post": [3, 0]})  # fmt: skip
    api.convert(points, str(tmp_path / "synapses"), annotation_type="point",
                resolution=(8, 8, 40), relationships=[("pre", "pre"), ("post", "post")],
                scheduler="sync", progress=False)  # fmt: skip
    places = [str(tmp_path / "seg"), str(tmp_path / "synapses")]
    layers = describe_all(places, ["http://h/seg", "http://h/synapses"], None)
    assert [layer.layer_type for layer in layers] == ["segmentation", "annotation"]
    annotation = layers[1]
    assert annotation.resolution_nm == (8.0, 8.0, 40.0)
    assert annotation.voxel_offset == (1, 2, 3) and annotation.size == (20, 29, 8)
    state = viewer_state(layers)
    entry = state["layers"][1]
    assert entry == {
        "type": "annotation",
        "source": "precomputed://http://h/synapses/",
        "name": "synapses",
        "linkedSegmentationLayer": {"pre": "seg", "post": "seg"},
        "filterBySegmentation": ["pre", "post"],
    }
