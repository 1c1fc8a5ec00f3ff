"""`shardwright view` without a browser: the state it builds for each kind of dataset, what
its servers hand out, and its refusals. (Rendering in a real browser: test_view_browser.)"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.errors import ShardwrightWarning
from shardwright.version import install_command
from shardwright.viewing import viewer
from shardwright.viewing.viewer import ViewError, open_view
from tests.support.segment_objects import write_multilod_meshes, write_segmentation

pytest.importorskip("neuroglancer", reason="the view extra: pip install -e '.[view]'")

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


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def test_the_state_shows_every_dataset_as_its_kind(
    running: viewer.View, datasets: dict[str, Any]
) -> None:
    state = running.state
    base = running.data_server.url
    assert state["dimensions"] == {"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [4e-8, "m"]}
    assert state["position"] == [48.0, 40.0, 20.0]  # the centre of the first dataset
    image, segmentation, zarr_image = state["layers"]
    assert image["type"] == "image" and image["source"] == f"precomputed://{base}/data/0/"
    low, high = image["shaderControls"]["normalized"]["range"]
    voxels = datasets["image"]
    assert voxels.min() <= low < high <= voxels.max()
    assert segmentation["type"] == "segmentation"
    assert segmentation["source"] == f"precomputed://{base}/data/1/"
    assert "segments" not in segmentation  # no meshes to pick out: every segment shows
    assert zarr_image["type"] == "image" and zarr_image["source"] == f"zarr3://{base}/data/2/"
    assert [layer["name"] for layer in state["layers"]] == ["em", "seg", "em.zarr"]
    # the viewer holds that state: what the browser at `url` is handed
    held = running.viewer.state.to_json()
    assert [layer["source"] for layer in held["layers"]] == [
        layer["source"] for layer in state["layers"]
    ]


def test_the_viewer_hands_out_its_client_and_the_data_server_each_dataset(
    running: viewer.View, datasets: dict[str, Any]
) -> None:
    running.start()
    assert "/v/" in running.url and running.url.startswith("http://127.0.0.1:")
    page = _get(running.url).decode()
    assert "neuroglancer" in page.lower()  # the package's client, from the package's server
    root = datasets["root"]
    base = running.data_server.url
    assert _get(f"{base}/data/1/info") == (root / "seg" / "info").read_bytes()
    for layer, want in zip(running.state["layers"][:2], ("image", "labels"), strict=True):
        http_url = layer["source"].removeprefix("precomputed://")
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": http_url}).result()
        got = np.asarray(store.read().result())[..., 0]
        np.testing.assert_array_equal(got, datasets[want].T)


def test_a_segmentation_with_meshes_shows_a_few_of_its_segments(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "unsharded"
    labels = write_segmentation(source, "mesh", None)
    write_multilod_meshes(source / "mesh", np.arange(1, 5, dtype=np.uint64))
    api.convert(str(source), str(tmp_path / "seg"), with_meshes=True, scheduler="sync",
                progress=False)  # fmt: skip
    view = open_view([str(tmp_path / "seg")])
    try:
        shown = {int(s) for s in view.state["layers"][0]["segments"]}
    finally:
        view.close()
    assert shown and 0 not in shown and shown <= set(np.unique(labels).tolist())


def test_jupyter_shows_a_link(running: viewer.View) -> None:
    html = running._repr_html_()
    assert html.startswith('<a href="http://127.0.0.1:') and "em, seg, em.zarr" in html


def test_missing_datasets_and_a_missing_client_are_refused_before_serving(
    tmp_path: pathlib.Path, datasets: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ViewError, match="nowhere: not found"):
        open_view([str(tmp_path / "nowhere")])
    (tmp_path / "plain").mkdir()
    with pytest.raises(ViewError, match="plain: Neuroglancer reads precomputed, zarr .* and N5"):
        open_view([str(tmp_path / "plain")])
    with pytest.raises(ViewError, match=r"image.npy: .* not this file: convert it first"):
        open_view([str(datasets["root"] / "image.npy")])
    with pytest.raises(ViewError, match="view reads local folders and gs://, s3:// or http"):
        open_view(["ftp://host/volume"])
    with pytest.raises(ViewError, match="at least one dataset"):
        open_view([])
    monkeypatch.setattr(viewer.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ViewError, match=re.escape(install_command("view"))):
        open_view([str(datasets["root"] / "em")])


def test_the_view_command_prints_the_url_and_stops_on_sigterm(datasets: dict[str, Any]) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "view", str(datasets["root"] / "em")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "/v/" in url
        assert "neuroglancer" in _get(url).decode().lower()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()


def test_open_hands_the_url_to_the_users_browser(
    datasets: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """--open starts the browser named by $BROWSER (Python's webbrowser) on the printed URL;
    SIGTERM while that browser's command still runs (webbrowser waits for it: here it lingers
    two seconds) ends the view as a stop while serving does, status 0."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\nsleep 2\n')
    browser.chmod(0o755)
    process = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "view", "--open", str(datasets["root"] / "em")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BROWSER": str(browser)},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        deadline = time.monotonic() + 20
        while not (opened.exists() and opened.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert opened.read_text().strip() == url
        assert process.poll() is None, "the view keeps running after opening the browser"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()


def test_open_says_so_where_no_browser_can_start(datasets: dict[str, Any]) -> None:
    """No display, no $BROWSER, no browser on PATH: --open says it found none (and keeps
    serving the printed URL) instead of doing nothing silently."""
    bare = {
        k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "view", "--open", str(datasets["root"] / "em")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**bare, "PATH": "/nonexistent"},
    )  # fmt: skip
    watchdog = threading.Timer(60, process.kill)  # a line never said ends the reading
    watchdog.start()
    try:
        assert process.stderr is not None
        said = []
        while not said or ("--open found no browser" not in said[-1] and said[-1]):
            said.append(process.stderr.readline())
        assert "--open found no browser to start here" in said[-1], said
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # it goes on serving the URL it printed
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    assert answer.status == 200
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"{url} is not served")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        watchdog.cancel()
        process.kill()


def _foreign_sources(root: pathlib.Path, zyx: np.ndarray) -> dict[str, str]:
    """The same image as other tools write it, and the scheme Neuroglancer reads each with."""
    import zarr

    ts.open({
        "driver": "zarr3", "kvstore": f"file://{root}/ts.zarr/", "create": True,
        "metadata": {
            "shape": list(zyx.shape), "data_type": "uint8", "dimension_names": ["z", "y", "x"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 32, 32]}},
        },
    }).result().write(zyx).result()  # fmt: skip
    v2 = zarr.create_array(str(root / "v2.zarr"), shape=zyx.shape, chunks=(8, 32, 32),
                           dtype="uint8", zarr_format=2)  # fmt: skip
    v2[...] = zyx
    ts.open({
        "driver": "n5", "kvstore": f"file://{root}/vol.n5/", "create": True,
        "metadata": {"dimensions": list(zyx.shape[::-1]), "blockSize": [32, 32, 8],
                     "dataType": "uint8", "compression": {"type": "raw"}},
    }).result().write(zyx.transpose(2, 1, 0)).result()  # fmt: skip
    ts.open({
        "driver": "neuroglancer_precomputed", "kvstore": f"file://{root}/unsharded/",
        "create": True,
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
        "scale_metadata": {"size": list(zyx.shape[::-1]), "resolution": [8, 8, 40],
                           "chunk_size": [32, 32, 8], "encoding": "raw"},
    }).result().write(zyx.transpose(2, 1, 0)[..., np.newaxis]).result()  # fmt: skip
    return {"ts.zarr": "zarr3", "v2.zarr": "zarr2", "vol.n5": "n5", "unsharded": "precomputed"}


def test_sources_and_other_tools_datasets_are_viewed_beside_a_conversion(
    tmp_path: pathlib.Path, datasets: dict[str, Any]
) -> None:
    """zarr v2 and v3, N5 and unsharded precomputed written by TensorStore and zarr-python
    become layers beside the converted dataset, each read by its own Neuroglancer scheme from
    the data server, and each served there (`view SRC DEST`)."""
    kinds = _foreign_sources(tmp_path, datasets["image"])
    opened = api.view(str(datasets["root"] / "em"), *(str(tmp_path / k) for k in kinds))
    try:
        server = opened.data_server.url
        layers = opened.state["layers"]
        assert [layer["name"] for layer in layers] == ["em", *kinds]
        for i, scheme in enumerate(kinds.values(), 1):
            assert _url(layers[i]["source"]) == f"{scheme}://{server}/data/{i}/"
            assert layers[i]["type"] == "image"
        # The bare zarr arrays hold no voxel size: each is placed on the first layer's grid by
        # a transform naming its axes; the others' metadata places them.
        zyx = [[40e-9, "m"], [8e-9, "m"], [8e-9, "m"]]
        names = {"ts.zarr": ["z", "y", "x"], "v2.zarr": ["d0", "d1", "d2"]}  # as Neuroglancer's
        for i, name in enumerate(kinds, 1):
            if name in names:
                transform = layers[i]["source"]["transform"]
                assert transform["outputDimensions"] == dict(zip("zyx", zyx, strict=True))
                assert transform["inputDimensions"] == dict(zip(names[name], zyx, strict=True))
                assert transform["matrix"] == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
            else:
                assert isinstance(layers[i]["source"], str)
        metadata = {"zarr3": "zarr.json", "zarr2": ".zarray", "n5": "attributes.json",
                    "precomputed": "info"}  # fmt: skip
        for i, scheme in enumerate(kinds.values(), 1):
            assert _get(f"{server}/data/{i}/{metadata[scheme]}")
        link = opened.app_link
        assert link.startswith("https://neuroglancer-demo.appspot.com/#!")
        state = json.loads(urllib.parse.unquote(link.split("#!", 1)[1]))
        assert state == json.loads(json.dumps(opened.state))
    finally:
        opened.close()


def _url(source: str | dict[str, Any]) -> str:
    """A layer source's URL, whether it is given alone or with a transform."""
    return source["url"] if isinstance(source, dict) else source


def test_a_bare_array_is_placed_as_its_conversion_read_it(tmp_path: pathlib.Path) -> None:
    """`view SRC DEST` where SRC is a zarr array stored x-fastest-last (read with
    --source-axes xyz) holding no voxel size, DEST its conversion at 8x8x40 nm from voxel
    (10, 20, 3): SRC's layer takes DEST's voxel size and offset and names its dimensions in
    the order the array holds them, so both layers cover the same place."""
    import zarr

    xyz = np.random.default_rng(2).integers(0, 255, (40, 30, 12), dtype=np.uint8)
    array = zarr.create_array(str(tmp_path / "src.zarr"), shape=xyz.shape, chunks=(16, 16, 4),
                              dtype="uint8", zarr_format=2)  # fmt: skip
    array[...] = xyz
    api.convert(str(tmp_path / "src.zarr"), str(tmp_path / "dest"), source_axes="xyz",
                resolution=(8, 8, 40), voxel_offset=(10, 20, 3), scheduler="sync",
                progress=False)  # fmt: skip
    opened = open_view([str(tmp_path / "src.zarr"), str(tmp_path / "dest")])
    try:
        source, dest = opened.state["layers"]
        assert isinstance(dest["source"], str)  # its info places it
        xyz = [[8e-9, "m"], [8e-9, "m"], [40e-9, "m"]]
        assert source["source"]["transform"] == {
            "outputDimensions": dict(zip("xyz", xyz, strict=True)),
            "inputDimensions": dict(zip(["d0", "d1", "d2"], xyz, strict=True)),
            "matrix": [[1, 0, 0, 10], [0, 1, 0, 20], [0, 0, 1, 3]],
        }
        assert opened.layers[0].size == opened.layers[1].size == (40, 30, 12)
        assert opened.state["dimensions"]["z"] == [pytest.approx(40e-9), "m"]
        assert opened.state["position"] == [30.0, 35.0, 9.0]  # DEST's middle
    finally:
        opened.close()
    alone = open_view([str(tmp_path / "src.zarr")])  # nothing to take a voxel size from
    try:
        (layer,) = alone.state["layers"]
        assert layer["source"]["transform"]["outputDimensions"]["z"] == [1e-9, "m"]
    finally:
        alone.close()


def test_a_remote_dataset_is_read_where_it_is(datasets: dict[str, Any]) -> None:
    """A dataset behind an http(s) URL (here another data server on loopback) is a layer whose
    source is that URL: nothing of it goes through the view's own data server."""
    from shardwright.viewing.serve import make_server

    remote = make_server(routes={"/lab/em": str(datasets["root"] / "em")})
    threading.Thread(target=remote.serve_forever, daemon=True).start()
    try:
        url = f"{remote.url}/lab/em"
        with warnings.catch_warnings():
            warnings.simplefilter("error", ShardwrightWarning)  # readable as Neuroglancer reads
            opened = api.view(url)
        try:
            (layer,) = opened.state["layers"]
            assert layer["source"] == f"precomputed://{url}/" and layer["name"] == "em"
            assert opened.layers[0].size == IMAGE_XYZ
        finally:
            opened.close()
    finally:
        remote.shutdown()
        remote.server_close()


def test_datasets_in_buckets_are_layers_read_from_the_buckets(
    tmp_path: pathlib.Path, datasets: dict[str, Any], s3: Any, gcs: Any
) -> None:
    """A dataset in a bucket behind another endpoint than the cloud's own (moto's S3, the GCS
    emulator) is read at that endpoint's URL of the bucket, not through the view's data
    server; on the clouds themselves gs:// and s3:// stay for Neuroglancer to resolve. Where
    Neuroglancer would be refused (a private bucket; a public one without CORS) a warning
    says so."""
    common = dict(scheduler="sync", progress=False, resolution=(8, 8, 40), chunk_size=(32, 32, 16))
    image = str(datasets["root"] / "image.npy")
    s3.make_bucket("view-s3")
    api.convert(image, "s3://view-s3/em", storage_options=s3.options(), **common)
    # The bucket is private: Neuroglancer, reading without credentials, would show nothing.
    with pytest.warns(ShardwrightWarning, match=r"view-s3/em/info: not readable without cred"):
        opened = api.view("s3://view-s3/em", storage_options=s3.options())
    try:
        (layer,) = opened.state["layers"]
        assert layer["source"] == f"precomputed://{s3.endpoint}/view-s3/em/"
        assert layer["type"] == "image" and opened.layers[0].size == IMAGE_XYZ
    finally:
        opened.close()
    gcs.make_bucket("view-gs")
    api.convert(image, "gs://view-gs/em.zarr", format="zarr3", storage_options=gcs.options(),
                **common)  # fmt: skip
    endpoint = gcs.conformant_endpoint  # the emulator, answering CORS as GCS does
    with pytest.warns(ShardwrightWarning, match=r"zarr.json: answered without CORS for the vi"):
        opened = api.view("gs://view-gs/em.zarr", storage_options=gcs.options(endpoint))
    try:
        (layer,) = opened.state["layers"]
        assert layer["source"] == f"zarr3://{endpoint}/view-gs/em.zarr/"
        assert opened.layers[0].resolution_nm == (8.0, 8.0, 40.0)
    finally:
        opened.close()
    google = {"endpoint_url": "https://storage.googleapis.com"}
    amazon = {"client_kwargs": {"endpoint_url": "https://s3.us-west-2.amazonaws.com"}}
    assert viewer.bucket_url("gs://b/em", google) == "gs://b/em"
    assert viewer.bucket_url("s3://b/em", amazon) == "s3://b/em"
    assert viewer.bucket_url("gs://b/em", None) == "gs://b/em"


def test_a_remote_zarr_v2_group_is_checked_by_the_metadata_it_has(tmp_path: pathlib.Path) -> None:
    """An OME-Zarr v2 group holds `.zgroup`, not `.zarray`: the readability check fetches what
    is there, so a readable group draws no warning."""
    import zarr

    from shardwright.viewing.serve import make_server

    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=2)
    group.create_array("0", shape=(8, 32, 32), chunks=(8, 32, 32), dtype="uint8")[...] = 3
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"]
    scale = [{"type": "scale", "scale": [40, 8, 8]}]
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": axes,
            "datasets": [{"path": "0", "coordinateTransformations": scale}],
        }
    ]
    remote = make_server(routes={"/g": str(tmp_path / "g.zarr")}, port=0)
    threading.Thread(target=remote.serve_forever, daemon=True).start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ShardwrightWarning)
            opened = api.view(f"{remote.url}/g")
        try:
            assert opened.state["layers"][0]["source"] == f"zarr2://{remote.url}/g/"
        finally:
            opened.close()
    finally:
        remote.shutdown()
        remote.server_close()
