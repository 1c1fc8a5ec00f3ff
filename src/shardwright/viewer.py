"""`shardwright view`: datasets and the Neuroglancer client behind one local origin, and the
URL of a viewer state that opens every dataset ready to look at.

The client is the one the `neuroglancer` package ships (`pip install 'shardwright[view]'`):
nothing is fetched from another site. Each dataset is served under `/data/<n>/`; the state
names one layer per dataset (images with a contrast taken from the data, segmentations with a
few of their segments selected, so that their meshes and skeletons show), the first dataset's
voxel size and units, and the view centred on the data.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import pathlib
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.errors import ShardwrightError
from shardwright.manifest import read_manifest
from shardwright.serve import DatasetServer, make_server, run_until_stopped
from shardwright.sources import open_source
from shardwright.store import Store

SAMPLE_EDGE = 64  # voxels per axis read from each dataset's centre for contrast and segments
SHOWN_SEGMENTS = 8
_STATE_SAFE = ',:[]{}"/'  # left as they are in the fragment, as Neuroglancer does


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


def client_folder() -> pathlib.Path:
    """The Neuroglancer client's static files, from the installed `neuroglancer` package
    (found without importing it: its import pulls in a web server we do not use)."""
    spec = importlib.util.find_spec("neuroglancer")
    if spec is None or spec.origin is None:
        raise ViewError("viewing needs the Neuroglancer client: pip install 'shardwright[view]'")
    folder = pathlib.Path(spec.origin).parent / "static" / "client"
    if not (folder / "index.html").is_file():
        raise ViewError(f"the installed neuroglancer package has no built client in {folder}")
    return folder


def describe(dest: str, index: int, server_url: str) -> DatasetLayer:
    """The layer of the dataset at `dest`, served as `/data/<index>/` of `server_url`."""
    store = Store(dest)
    manifest = read_manifest(store)
    if manifest is None:
        raise ViewError(f"{dest}: not found, or not a finished shardwright dataset")
    source = open_source(dest)
    plan = manifest.plan
    layer_type = source.hints.layer_type or plan.get("layer_type") or "image"
    if layer_type not in ("image", "segmentation"):
        layer_type = "image"
    scheme = "precomputed" if plan.get("format", "precomputed") == "precomputed" else "zarr3"
    sample = _centre_sample(source)
    return DatasetLayer(
        name=os.path.basename(os.path.normpath(dest)) or f"dataset-{index}",
        source=f"{scheme}://{server_url}/data/{index}/",
        layer_type=layer_type,
        resolution_nm=source.hints.resolution or (1.0, 1.0, 1.0),
        voxel_offset=source.hints.voxel_offset or (0, 0, 0),
        size=source.shape_xyz,
        contrast=_contrast(sample) if layer_type == "image" else None,
        segments=_segments(sample) if layer_type == "segmentation" else (),
    )


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
        "crossSectionScale": max(1.0, max(first.size[:2]) / 512),
        "projectionScale": max(first.size) * 2.0,
        "layers": state_layers,
        "selectedLayer": {"layer": first.name, "visible": False},
        "layout": "4panel",
    }


def state_url(server_url: str, state: dict[str, Any]) -> str:
    """The client's URL with the state in its fragment, as Neuroglancer writes it."""
    text = urllib.parse.quote(json.dumps(state, separators=(",", ":")), safe=_STATE_SAFE)
    return f"{server_url}/#!{text}"


@dataclass
class View:
    """Datasets served with the Neuroglancer client: `url` opens them all. Serving starts
    with `start` (a background thread, for notebooks) or `serve` (until Ctrl-C or SIGTERM)."""

    server: DatasetServer
    url: str
    layers: list[DatasetLayer]

    def start(self) -> View:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def serve(self) -> None:
        run_until_stopped(self.server)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _repr_html_(self) -> str:  # what Jupyter shows
        link = html.escape(self.url, quote=True)
        names = html.escape(", ".join(layer.name for layer in self.layers))
        return f'<a href="{link}" target="_blank">open {names} in Neuroglancer</a>'


def open_view(
    destinations: Sequence[str], host: str = "127.0.0.1", port: int = 0, log: Any | None = None
) -> View:
    """A view of `destinations` (local datasets), not yet serving. Refuses what cannot be
    viewed (a missing dataset, no Neuroglancer client) before serving anything."""
    if not destinations:
        raise ViewError("name at least one dataset to view")
    folders = []
    for dest in destinations:
        if "://" in dest and not dest.startswith("file://"):
            raise ViewError(f"{dest}: view serves local datasets; open remote ones directly")
        folder = os.path.abspath(dest.removeprefix("file://"))
        if not os.path.isdir(folder):
            raise ViewError(f"{dest}: not found")
        folders.append(folder)
    routes = {"/": str(client_folder())}
    routes.update({f"/data/{i}": folder for i, folder in enumerate(folders)})
    server = make_server(host=host, port=port, routes=routes, log=log)
    try:
        layers = [describe(folder, i, server.url) for i, folder in enumerate(folders)]
    except BaseException:
        server.server_close()
        raise
    return View(server, state_url(server.url, viewer_state(layers)), layers)
