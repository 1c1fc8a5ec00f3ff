"""`shardwright view`: datasets served here, the Neuroglancer viewer on them, and its URL.

The viewer is the `neuroglancer` package's own (the `view` extra): its Python
server hands the browser the client it ships (nothing fetched from another site) and the
viewer state `view_state` builds (one layer per dataset, each placed in one voxel space). Any
dataset Neuroglancer reads can be a layer: ours, another tool's, or a source before conversion
(precomputed, zarr v2 and v3, OME-Zarr, N5). Local ones are served by `serve.DatasetServer`
under `/data/<n>/`, both servers on loopback unless told otherwise; remote ones (gs://, s3://,
http(s)://) Neuroglancer reads where they are, and a warning says where it will be refused.
`screenshot` renders the view in a headless Chromium.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import logging
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shardwright.version import install_command
from shardwright.viewing.serve import DatasetServer, make_server, run_until_stopped
from shardwright.viewing.state import (
    DatasetLayer,
    ViewError,
    bucket_url,
    describe_all,
    is_remote,
    neuroglancer_link,
    viewer_state,
    warn_unreadable,
)

RENDER_TIMEOUT = 120.0  # seconds a headless render may take before the view counts as broken
SCREENSHOT_RETRY = 0.1  # seconds between screenshots until one shows the state set
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


def neuroglancer_module() -> Any:
    """The `neuroglancer` package, imported only when a view is opened."""
    if importlib.util.find_spec("neuroglancer") is None:
        raise ViewError("viewing needs the Neuroglancer viewer: " + install_command("view"))
    import neuroglancer

    return neuroglancer


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
    stamp = f"shardwright capture {uuid.uuid4().hex}"
    with viewer.txn() as state:
        state.title = stamp
    deadline = time.monotonic() + timeout
    try:
        while True:  # early answers: at the old size, or of a state older than the one set
            answered = threading.Event()
            replies: list[Any] = []

            def keep(reply: Any, replies: list[Any] = replies, answered: Any = answered) -> None:
                replies.append(reply)
                answered.set()

            viewer.async_screenshot(keep)
            if not answered.wait(max(0.0, deadline - time.monotonic())):
                raise ViewError(
                    f"the view did not finish loading within {timeout:g} s: a dataset in it "
                    "is missing or unreadable"
                )
            shot = replies[0].screenshot
            # The client may answer before the state last set here reached it: its reply
            # names the state it drew, and only one stamped as below (set after the state
            # the caller set) shows that state. The client normalizes the rest of a state
            # (numbers, the tabs it adds), so the stamp, not the whole state, is compared.
            drawn = replies[0].viewer_state.title == stamp
            if (shot.width, shot.height) == tuple(size) and drawn:
                return bytes(shot.image)
            if time.monotonic() > deadline:
                raise ViewError(f"the viewer did not draw the state given within {timeout:g} s")
            time.sleep(SCREENSHOT_RETRY)
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
    routes = {f"/data/{i}": place for i, place in enumerate(places) if not is_remote(place)}
    data_server = make_server(host=host, port=0, routes=routes, log=log)
    try:
        source_urls = [
            bucket_url(place, storage_options)
            if is_remote(place)
            else f"{data_server.url}/data/{i}"
            for i, place in enumerate(places)
        ]
        layers = describe_all(places, source_urls, storage_options)
        state = viewer_state(layers)
        neuroglancer.set_server_bind_address(host, port)
        viewer = neuroglancer.Viewer()
        viewer.set_state(state)
        parts = urllib.parse.urlsplit(str(viewer.get_viewer_url()))
        warn_unreadable(layers, f"{parts.scheme}://{parts.netloc}")
    except BaseException:
        data_server.server_close()
        raise
    return View(data_server, viewer, state, layers)


def _place(dest: str) -> str:
    """A remote URL as it is; a local dataset as its absolute folder, refused where it is
    missing or a file (a .npy, a TIFF: nothing Neuroglancer reads)."""
    if is_remote(dest):
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


def _write_png(path: str, png: bytes) -> None:
    """A rendered view written to `path`, its folder made first (`--screenshot shots/a.png`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "wb") as out:
        out.write(png)
