"""Annotations and segment properties in the Neuroglancer client itself (headless Chromium,
SwiftShader WebGL), in the state `view SEG ANNOTATIONS` builds.

Points we wrote from a table draw, over our segmentation, exactly where Neuroglancer draws
the same points given in its state as a local annotation layer (moved by 3 voxels, they do
not: the control); with the relationship filtering by a selected segment, exactly its rows
draw; and the segmentation layer's segment list shows the label our segment properties give
a segment. Skips as the other browser tests do."""

from __future__ import annotations

import copy
import io
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shardwright import api
from shardwright.viewing.serve import make_server
from shardwright.viewing.viewer import capture_png, headless_browser, open_view
from tests.support.browser import NEEDS_BROWSER

pytestmark = NEEDS_BROWSER

RESOLUTION = (8, 8, 40)
SHOT = (384, 384)
DIMENSIONS = {axis: [nm * 1e-9, "m"] for axis, nm in zip("xyz", RESOLUTION, strict=True)}
# Points (voxels) and the segment each lies in: segment 1 is x < 32, segment 2 the rest.
POINTS = pd.DataFrame({
    "x": [10.5, 40.5, 50.5, 20.5, 27.5], "y": [12.5, 20.5, 50.5, 40.5, 30.5],
    "z": [4.5] * 5, "pre": np.array([1, 2, 2, 1, 1], np.uint64),
})  # fmt: skip
LABELS = pd.DataFrame({"id": np.array([1, 2], np.uint64), "label": ["pyramidal", "basket"]})


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The segmentation (with its segment properties) and the points, converted and served;
    the state `view` builds for them; one viewer in one headless Chromium."""
    import neuroglancer

    root = tmp_path_factory.mktemp("annotated")
    labels = np.ones((8, 64, 64), np.uint64)
    labels[:, :, 32:] = 2
    np.save(root / "seg.npy", labels)
    LABELS.to_csv(root / "cells.csv", index=False)
    run = dict(scheduler="sync", progress=False)
    api.convert(str(root / "seg.npy"), str(root / "seg"), resolution=RESOLUTION,
                segment_properties=str(root / "cells.csv"), **run)  # fmt: skip
    api.convert(POINTS, str(root / "synapses"), annotation_type="point", resolution=RESOLUTION,
                relationships=[("pre", "pre")], **run)  # fmt: skip
    server = make_server(routes={"/data": str(root)}, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    view = open_view([str(root / "seg"), str(root / "synapses")])
    try:
        state = copy.deepcopy(view.state)
    finally:
        view.close()
    for layer, name in zip(state["layers"], ("seg", "synapses"), strict=True):
        layer["source"] = f"precomputed://{server.url}/data/{name}/"
    state.update(layout="xy", position=[32.0, 32.0, 4.5], crossSectionScale=0.2)
    neuroglancer.set_server_bind_address("127.0.0.1", 0)
    viewer = neuroglancer.Viewer()
    try:
        with headless_browser(viewer) as browser:
            yield {"state": state, "viewer": viewer, "browser": browser}
    finally:
        server.shutdown()
        server.server_close()
        neuroglancer.stop()


Render = Callable[[dict[str, Any], str], np.ndarray]


@pytest.fixture()
def render(shown: dict[str, Any], tmp_path: pathlib.Path, keep_screenshot: Any) -> Render:
    """render(state, name): the state drawn, its PNG kept as name.png in the test's tmp dir."""
    from PIL import Image

    def run(state: dict[str, Any], name: str) -> np.ndarray:
        shown["viewer"].set_state(state)
        png = capture_png(shown["viewer"], SHOT, 120)
        (tmp_path / f"{name}.png").write_bytes(png)
        keep_screenshot(tmp_path / f"{name}.png")
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    return run


def _local(points: pd.DataFrame) -> dict[str, Any]:
    """The same points handed to Neuroglancer in its state: the reference."""
    return {
        "type": "annotation", "name": "synapses",
        "source": {"url": "local://annotations", "transform": {"outputDimensions": DIMENSIONS}},
        "annotations": [{"type": "point", "id": str(n), "point": [row.x, row.y, row.z]}
                        for n, row in enumerate(points.itertuples(), start=1)],
    }  # fmt: skip


def test_points_draw_where_neuroglancer_draws_them_over_the_segmentation(
    shown: dict[str, Any], render: Render
) -> None:
    state = copy.deepcopy(shown["state"])
    ours = state["layers"][1]
    assert ours["linkedSegmentationLayer"] == {"pre": "seg"}
    ours.pop("filterBySegmentation")  # every point, whatever segment is selected
    state["layers"][0]["segments"] = []
    mine = render(state, "ours")
    state["layers"][1] = _local(POINTS)
    reference = render(state, "reference")
    bare = render({**state, "layers": state["layers"][:1]}, "no-points")
    assert (mine != bare).any(axis=-1).sum() > 20  # the points are on screen
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"
    moved = POINTS.assign(x=POINTS["x"] + 3)
    state["layers"][1] = _local(moved)
    assert not np.array_equal(mine, render(state, "moved"))  # the control


def test_a_selected_segment_filters_its_rows_through_the_relationship_index(
    shown: dict[str, Any], render: Render
) -> None:
    state = copy.deepcopy(shown["state"])
    assert state["layers"][1]["filterBySegmentation"] == ["pre"]
    state["layers"][0]["segments"] = ["2"]
    mine = render(state, "ours")
    state["layers"][1] = _local(POINTS[POINTS["pre"] == 2])
    reference = render(state, "reference")
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"
    state["layers"][1] = _local(POINTS)
    assert not np.array_equal(mine, render(state, "every-point"))  # not every point


def test_the_segment_list_shows_the_label_our_segment_properties_give(
    shown: dict[str, Any],
) -> None:
    state = copy.deepcopy(shown["state"])
    state["layers"][0]["tab"] = "segments"
    state["selectedLayer"] = {"layer": "seg", "visible": True}
    shown["viewer"].set_state(state)
    body = shown["browser"].root_element
    deadline = time.monotonic() + 60
    while "pyramidal" not in body.text or "basket" not in body.text:
        assert time.monotonic() < deadline, f"no segment label shown: {body.text[:500]!r}"
        time.sleep(0.5)
