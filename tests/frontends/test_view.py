"""`shardwright view` without a browser: the state it builds for each kind of dataset, what
its server hands out, and its refusals. (Rendering in a real browser: test_view_browser.)"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api, viewer
from shardwright.viewer import ViewError, open_view

IMAGE_XYZ = (96, 80, 40)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("view")
    rng = np.random.default_rng(5)
    image = (rng.normal(120, 20, IMAGE_XYZ[::-1]).clip(0, 255)).astype(np.uint8)
    labels = (np.arange(np.prod(IMAGE_XYZ)).reshape(IMAGE_XYZ[::-1]) // 997 % 13).astype(np.uint64)
    np.save(root / "image.npy", image)
    np.save(root / "labels.npy", labels)
    common = dict(scheduler="sync", progress=False, resolution=(8, 8, 40), chunk_size=(32, 32, 16))
    api.convert(str(root / "image.npy"), str(root / "em"), **common)
    api.convert(
        str(root / "labels.npy"),
        str(root / "seg"),
        layer_type="segmentation",
        encoding="compressed_segmentation",
        **common,
    )
    api.convert(str(root / "image.npy"), str(root / "em.zarr"), format="zarr3", mips=1, **common)
    return {"root": root, "image": image, "labels": labels}


@pytest.fixture()
def running(datasets: dict[str, Any]) -> Iterator[viewer.View]:
    root = datasets["root"]
    opened = api.view(str(root / "em"), str(root / "seg"), str(root / "em.zarr"))
    yield opened
    opened.close()


def _state(url: str) -> dict[str, Any]:
    fragment = urllib.parse.urlsplit(url).fragment
    assert fragment.startswith("!")
    return json.loads(urllib.parse.unquote(fragment[1:]))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def test_the_state_shows_every_dataset_as_its_kind(
    running: viewer.View, datasets: dict[str, Any]
) -> None:
    state = _state(running.url)
    base = running.server.url
    assert state["dimensions"] == {"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [4e-8, "m"]}
    assert state["position"] == [48.0, 40.0, 20.0]  # the centre of the first dataset
    image, segmentation, zarr_image = state["layers"]
    assert image["type"] == "image" and image["source"] == f"precomputed://{base}/data/0/"
    low, high = image["shaderControls"]["normalized"]["range"]
    voxels = datasets["image"]
    assert voxels.min() <= low < high <= voxels.max()
    assert segmentation["type"] == "segmentation"
    assert segmentation["source"] == f"precomputed://{base}/data/1/"
    shown = {int(s) for s in segmentation["segments"]}
    assert shown and 0 not in shown and shown <= set(np.unique(datasets["labels"]).tolist())
    assert zarr_image["type"] == "image" and zarr_image["source"] == f"zarr3://{base}/data/2/"
    assert [layer["name"] for layer in state["layers"]] == ["em", "seg", "em.zarr"]


def test_the_server_hands_out_the_client_and_each_dataset(
    running: viewer.View, datasets: dict[str, Any]
) -> None:
    base = running.server.url
    index = _get(f"{base}/").decode()
    assert "<title>neuroglancer</title>" in index
    for script in [part.split('"')[0] for part in index.split('src="')[1:]]:
        assert len(_get(f"{base}/{script}")) > 1000  # the client's code, served here
    root = datasets["root"]
    assert _get(f"{base}/data/1/info") == (root / "seg" / "info").read_bytes()
    for layer, want in zip(_state(running.url)["layers"][:2], ("image", "labels"), strict=True):
        http_url = layer["source"].removeprefix("precomputed://")
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": http_url}).result()
        got = np.asarray(store.read().result())[..., 0]
        np.testing.assert_array_equal(got, datasets[want].T)


def test_jupyter_shows_a_link(running: viewer.View) -> None:
    html = running._repr_html_()
    assert html.startswith('<a href="http://127.0.0.1:') and "em, seg, em.zarr" in html


def test_missing_datasets_and_a_missing_client_are_refused_before_serving(
    tmp_path: pathlib.Path, datasets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ViewError, match="nowhere: not found"):
        open_view([str(tmp_path / "nowhere")])
    (tmp_path / "plain").mkdir()
    with pytest.raises(ViewError, match="not a finished shardwright dataset"):
        open_view([str(tmp_path / "plain")])
    with pytest.raises(ViewError, match="view serves local datasets"):
        open_view(["gs://bucket/volume"])
    monkeypatch.setattr(viewer.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ViewError, match=r"pip install 'shardwright\[view\]'"):
        open_view([str(datasets["root"] / "em")])


def test_the_view_command_prints_the_url_and_stops_on_sigterm(datasets: dict[str, Any]) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "view", str(datasets["root"] / "em"),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        state = _state(url)
        assert state["layers"][0]["name"] == "em"
        base = url.split("/#!")[0]
        assert b"neuroglancer" in _get(f"{base}/")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
