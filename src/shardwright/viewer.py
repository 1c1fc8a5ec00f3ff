"""`shardwright view`: datasets served here, the Neuroglancer viewer on them, and its URL.

The viewer is the `neuroglancer` package's own (`pip install 'shardwright[view]'`): its Python
server hands the browser the client it ships (nothing fetched from another site) and the
viewer state, which this module builds: one layer per dataset (images with a contrast taken
from the data, segmentations with a few of their segments selected where they have meshes or
skeletons to show), the first dataset's voxel size and units, the view centred on the data.
Any dataset Neuroglancer reads can be a layer: ours, or another tool's, or a source before
conversion (precomputed, zarr v2 and v3, OME-Zarr, N5), each placed by its own voxel size and
offset. Local ones are served by `serve.DatasetServer` under `/data/<n>/`, both servers on
loopback unless told otherwise; remote ones (gs://, s3://, http(s)://) Neuroglancer reads
where they are. `screenshot` renders the view in a headless Chromium.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import json
import logging
import os
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright import deadlines
from shardwright.errors import ShardwrightError, ShardwrightWarning
from shardwright.formats.vocabulary import VolumeType, names
from shardwright.manifest import read_manifest
from shardwright.planning.builder import LABEL_DTYPES
from shardwright.serve import DatasetServer, make_server, run_until_stopped
from shardwright.sources import open_source
from shardwright.store import Store

# What sits at a dataset's root, and the Neuroglancer data source scheme that reads it.
DATA_SCHEMES = (
    ("info", "precomputed"),
    ("zarr.json", "zarr3"),
    (".zarray", "zarr2"),
    (".zgroup", "zarr2"),
    ("attributes.json", "n5"),
)
REMOTE = ("gs://", "s3://", "http://", "https://")  # Neuroglancer reads these itself
NEUROGLANCER_APP = "https://neuroglancer-demo.appspot.com/"  # a public deployment of the client
SAMPLE_EDGE = 64  # voxels per axis read from each dataset's centre for contrast and segments
SHOWN_SEGMENTS = 8
RENDER_TIMEOUT = 120.0  # seconds a headless render may take before the view counts as broken
PANEL_PIXELS = 480  # the data's width in x or y fills about this many screen pixels
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Headless Chromium without a GPU: WebGL 2 through SwiftShader, software but exact; and none
# of the browser's own traffic (updates, sync, first-run pages), which an offline machine
# would only refuse.
BROWSER_FLAGS = (
    "--no-sandbox",
    "--use-gl=angle",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class ViewError(ShardwrightError, ValueError):
    """A dataset that cannot be viewed, or no Neuroglancer client to view it with."""


@dataclass(frozen=True)
class DatasetLayer:
    """What the viewer state needs to know of one dataset."""

    name: str
    source: str  # the Neuroglancer data source URL
    layer_type: str  # image | segmentation
    resolution_nm: tuple[float, float, float]
    voxel_offset: tuple[int, int, int]
    size: tuple[int, int, int]
    contrast: tuple[float, float] | None
    segments: tuple[int, ...]

    @property
    def centre(self) -> list[float]:
        return [o + s / 2 for o, s in zip(self.voxel_offset, self.size, strict=True)]


def neuroglancer_module() -> Any:
    """The `neuroglancer` package, imported only when a view is opened."""
    if importlib.util.find_spec("neuroglancer") is None:
        raise ViewError("viewing needs the Neuroglancer viewer: pip install 'shardwright[view]'")
    import neuroglancer

    return neuroglancer


def describe(
    dest: str, source_url: str, storage_options: dict[str, Any] | None = None
) -> DatasetLayer:
    """The layer of the dataset at `dest` (a local folder or a remote URL), which Neuroglancer
    reads at `source_url` (where the data server serves it, or the bucket's own URL: checked
    to be readable without credentials where it is an http(s) URL)."""
    store = Store(dest, storage_options)
    metadata_key, scheme = data_scheme(store, dest)
    if _remote(dest) and source_url.startswith(("http://", "https://")):
        check_anonymous_read(source_url, metadata_key)
    manifest = read_manifest(store)  # ours: its plan says what the layer is
    planned = manifest.plan.get("layer_type") if manifest is not None else None
    source = open_source(dest, storage_options=storage_options)
    layer_type = source.hints.layer_type or planned
    if layer_type is None:  # a source that does not say: as planning decides it
        layer_type = "segmentation" if np.dtype(source.dtype) in LABEL_DTYPES else "image"
    if layer_type not in names(VolumeType):
        layer_type = "image"
    sample = _centre_sample(source)
    # Selected segments are all a segmentation layer shows, in 2-D too: select a few only where
    # meshes or skeletons make them worth picking out.
    select = layer_type == "segmentation" and scheme == "precomputed" and _has_objects(store)
    return DatasetLayer(
        name=os.path.basename(os.path.normpath(dest.rstrip("/"))) or dest,
        source=f"{scheme}://{source_url.rstrip('/')}/",
        layer_type=layer_type,
        resolution_nm=source.hints.resolution or (1.0, 1.0, 1.0),
        voxel_offset=source.hints.voxel_offset or (0, 0, 0),
        size=source.shape_xyz,
        contrast=_contrast(sample) if layer_type == "image" else None,
        segments=_segments(sample) if select else (),
    )


def check_anonymous_read(url: str, key: str) -> None:
    """Warn where Neuroglancer, which reads without credentials, will be refused the dataset
    at `url` (its metadata object `key`): else the layer stays empty with no word why."""
    target = f"{url.rstrip('/')}/{key}"
    try:
        with urllib.request.urlopen(target, timeout=deadlines.timeout()) as response:
            response.read(1)
    except urllib.error.HTTPError as exc:
        refused = f"HTTP {exc.code}"
    except OSError as exc:
        refused = f"{type(exc).__name__}: {exc}"
    else:
        return
    warnings.warn(
        ShardwrightWarning(
            f"{target}: not readable without credentials ({refused}), and Neuroglancer reads "
            "without them: the layer will stay empty. Make the dataset public (a bucket policy "
            "allowing anonymous reads, and CORS for the viewer's origin), or copy it here"
        ),
        stacklevel=3,
    )


def data_scheme(store: Store, dest: str) -> tuple[str, str]:
    """The metadata object found at the root of the dataset at `dest` and the Neuroglancer
    data source scheme that reads it."""
    for key, scheme in DATA_SCHEMES:
        if store.exists(key):
            return key, scheme
    raise ViewError(
        f"{dest}: Neuroglancer reads precomputed, zarr (v2, v3, OME-Zarr) and N5 datasets, "
        f"and this is none of them: convert it first (shardwright convert {dest} OUT), then "
        "view OUT"
    )


def _has_objects(store: Store) -> bool:
    """Whether a precomputed segmentation's `info` names meshes or skeletons."""
    info = json.loads(store.read("info"))
    return bool(info.get("mesh") or info.get("skeletons"))


def _centre_sample(source: Any) -> np.ndarray:
    size = source.shape_xyz
    start = tuple(max(0, s // 2 - SAMPLE_EDGE // 2) for s in size)
    stop = tuple(min(s, a + SAMPLE_EDGE) for s, a in zip(size, start, strict=True))
    return np.asarray(source.read(start, stop))


def _contrast(sample: np.ndarray) -> tuple[float, float] | None:
    """The 1st and 99th percentiles of the first channel: where most voxels lie."""
    if sample.size == 0:
        return None
    low, high = np.percentile(sample[..., 0].astype(np.float64), [1, 99])
    if high <= low:
        high = low + 1
    return float(low), float(high)


def _segments(sample: np.ndarray) -> tuple[int, ...]:
    """The most frequent non-zero labels of the sample, to show a few meshes at once."""
    labels, counts = np.unique(sample[..., 0], return_counts=True)
    keep = labels != 0
    ranked = labels[keep][np.argsort(-counts[keep], kind="stable")]
    return tuple(int(label) for label in ranked[:SHOWN_SEGMENTS])


def viewer_state(layers: Sequence[DatasetLayer]) -> dict[str, Any]:
    """A Neuroglancer state showing `layers` in the first one's voxel space, centred on it."""
    first = layers[0]
    state_layers = []
    for layer in layers:
        entry: dict[str, Any] = {
            "type": layer.layer_type,
            "source": layer.source,
            "name": layer.name,
        }
        if layer.contrast is not None:
            entry["shaderControls"] = {"normalized": {"range": list(layer.contrast)}}
        if layer.segments:
            entry["segments"] = [str(s) for s in layer.segments]
        state_layers.append(entry)
    return {
        "dimensions": {a: [r * 1e-9, "m"] for a, r in zip("xyz", first.resolution_nm, strict=True)},
        "position": first.centre,
        "crossSectionScale": max(first.size[:2]) / PANEL_PIXELS,
        "projectionScale": max(first.size) * 2.0,
        "layers": state_layers,
        "selectedLayer": {"layer": first.name, "visible": False},
        "layout": "4panel",
    }


@dataclass
class View:
    """Datasets served by `data_server`, shown by the Neuroglancer viewer `viewer` at `url`
    (valid while this process runs). `start` serves in a background thread (notebooks),
    `serve` until Ctrl-C or SIGTERM; `close` stops the data server. The viewer's server is the
    `neuroglancer` package's, shared by every viewer in the process, and ends with it."""

    data_server: DatasetServer
    viewer: Any
    state: dict[str, Any]
    layers: list[DatasetLayer]
    _serving: bool = False

    @property
    def url(self) -> str:
        return str(self.viewer.get_viewer_url())

    @property
    def app_link(self) -> str:
        """The same view in any Neuroglancer deployment (`neuroglancer_link`)."""
        return neuroglancer_link(self.state)

    def start(self) -> View:
        threading.Thread(target=self.data_server.serve_forever, daemon=True).start()
        self._serving = True
        return self

    def serve(self) -> None:
        self._serving = True
        run_until_stopped(self.data_server)

    def close(self) -> None:
        if self._serving:  # shutdown waits for serve_forever: it would hang on a server never run
            self.data_server.shutdown()
            self._serving = False
        self.data_server.server_close()

    def screenshot(self, path: str, size: tuple[int, int] = (1024, 768)) -> None:
        """Render the view headless and write it as a PNG (the data server must be serving:
        `start` first)."""
        _write_png(path, render_png(self.viewer, size))

    def _repr_html_(self) -> str:  # what Jupyter shows
        link = html.escape(self.url, quote=True)
        names = html.escape(", ".join(layer.name for layer in self.layers))
        return f'<a href="{link}" target="_blank">open {names} in Neuroglancer</a>'


def write_screenshots(
    shots: Sequence[tuple[str, str]], size: tuple[int, int] = (1024, 768)
) -> None:
    """For each (dataset, PNG path) of `shots`, the dataset's own view rendered into the PNG,
    all in one headless Chromium (a browser start costs seconds)."""
    view = open_view([dataset for dataset, _ in shots]).start()
    try:
        with headless_browser(view.viewer):
            for layer, (_, path) in zip(view.layers, shots, strict=True):
                view.viewer.set_state(viewer_state([layer]))
                _write_png(path, capture_png(view.viewer, size))
    finally:
        view.close()


def render_png(viewer: Any, size: tuple[int, int], timeout: float = RENDER_TIMEOUT) -> bytes:
    """A neuroglancer viewer's view rendered in a headless Chromium, once every chunk in view
    has arrived, as PNG bytes."""
    with headless_browser(viewer):
        return capture_png(viewer, size, timeout)


@contextlib.contextmanager
def headless_browser(viewer: Any) -> Iterator[Any]:
    """A headless Chromium showing `viewer` (software WebGL), for as many captures as wanted."""
    neuroglancer_module()  # the clear error when the package is missing
    from neuroglancer.webdriver import Webdriver

    binary = browser_binary()
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium: the local driver, no downloads
    logging.getLogger("selenium").setLevel(logging.ERROR)
    with Webdriver(
        viewer,
        headless=True,
        browser="chrome",
        browser_binary_path=binary,
        extra_command_line_args=list(BROWSER_FLAGS),
        print_logs=False,
    ) as browser:
        yield browser


def capture_png(viewer: Any, size: tuple[int, int], timeout: float = RENDER_TIMEOUT) -> bytes:
    """The viewer's current view at `size` pixels, UI hidden, as PNG bytes. The client answers
    once every chunk in view has loaded, so a dataset that cannot load (missing, unreadable)
    never answers: that is a `ViewError` after `timeout` seconds, not a hang."""
    prior = viewer.config_state.state
    with viewer.config_state.txn() as config:
        config.show_ui_controls = False
        config.show_panel_borders = False
        config.viewer_size = list(size)
    try:
        for _ in range(5):  # the first answers may come before the canvas took the new size
            answered = threading.Event()
            replies: list[Any] = []

            def keep(reply: Any, replies: list[Any] = replies, answered: Any = answered) -> None:
                replies.append(reply)
                answered.set()

            viewer.async_screenshot(keep)
            if not answered.wait(timeout):
                raise ViewError(
                    f"the view did not finish loading within {timeout:g} s: a dataset in it "
                    "is missing or unreadable"
                )
            shot = replies[0].screenshot
            if (shot.width, shot.height) == tuple(size):
                break
        return bytes(shot.image)
    finally:
        viewer.config_state.set_state(prior)


def browser_binary() -> str:
    """The Chromium this machine has (Debian: apt-get install chromium chromium-driver)."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise ViewError(
        "a screenshot needs Chromium and its driver (Debian: apt-get install chromium "
        "chromium-driver)"
    )


def open_view(
    destinations: Sequence[str],
    host: str = "127.0.0.1",
    port: int = 0,
    log: Any | None = None,
    storage_options: dict[str, Any] | None = None,
) -> View:
    """A view of `destinations` (local datasets): the data server (not yet serving) and the
    viewer (listening at `port`). Refuses what cannot be viewed (a missing dataset, no
    `neuroglancer` package) before either server starts."""
    if not destinations:
        raise ViewError("name at least one dataset to view")
    places = [_place(dest) for dest in destinations]
    neuroglancer = neuroglancer_module()
    routes = {f"/data/{i}": place for i, place in enumerate(places) if not _remote(place)}
    data_server = make_server(host=host, port=0, routes=routes, log=log)
    try:
        layers = [
            describe(place, bucket_url(place, storage_options), storage_options)
            if _remote(place)
            else describe(place, f"{data_server.url}/data/{i}")
            for i, place in enumerate(places)
        ]
        state = viewer_state(layers)
        neuroglancer.set_server_bind_address(host, port)
        viewer = neuroglancer.Viewer()
        viewer.set_state(state)
    except BaseException:
        data_server.server_close()
        raise
    return View(data_server, viewer, state, layers)


def bucket_url(dest: str, storage_options: dict[str, Any] | None) -> str:
    """Where Neuroglancer reads a remote dataset: its URL as given (Neuroglancer resolves gs://
    and s3:// itself), or, for an S3 bucket behind another endpoint (MinIO, Ceph), the bucket's
    path-style URL there."""
    options = storage_options or {}
    endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
        "endpoint_url"
    )
    if dest.startswith("s3://") and endpoint:
        return f"{str(endpoint).rstrip('/')}/{dest.removeprefix('s3://')}"
    return dest


def _remote(dest: str) -> bool:
    return dest.startswith(REMOTE)


def _place(dest: str) -> str:
    """A remote URL as it is; a local dataset as its absolute folder, refused where it is
    missing or a file (a .npy, a TIFF: nothing Neuroglancer reads)."""
    if _remote(dest):
        return dest
    if "://" in dest and not dest.startswith("file://"):
        raise ViewError(f"{dest}: view reads local folders and gs://, s3:// or http(s):// URLs")
    folder = os.path.abspath(dest.removeprefix("file://"))
    if os.path.isfile(folder):
        raise ViewError(
            f"{dest}: Neuroglancer reads precomputed, zarr (v2, v3, OME-Zarr) and N5 datasets, "
            f"not this file: convert it first (shardwright convert {dest} OUT), then view OUT"
        )
    if not os.path.isdir(folder):
        raise ViewError(f"{dest}: not found")
    return folder


def neuroglancer_link(state: dict[str, Any], app: str = NEUROGLANCER_APP) -> str:
    """The view as a plain Neuroglancer link: the state in the URL fragment, which any
    deployment of the client opens (local layers while this process serves them)."""
    return f"{app}#!{urllib.parse.quote(json.dumps(state, separators=(',', ':')), safe='')}"


def _write_png(path: str, png: bytes) -> None:
    """A rendered view written to `path`, its folder made first (`--screenshot shots/a.png`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "wb") as out:
        out.write(png)
