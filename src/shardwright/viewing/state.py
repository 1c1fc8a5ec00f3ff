"""What `view` shows: each dataset as a Neuroglancer layer, all placed in one voxel space, and
the viewer state that holds them.

A layer's data source is the URL Neuroglancer reads it at: our data server's for a local
dataset, the bucket's own for a remote one. Precomputed volumes and OME-Zarr groups carry their
voxel size and offset, and Neuroglancer places them by it. A bare zarr array carries neither:
Neuroglancer would show it on axes of its own (d0, d1, d2, without units) beside the others,
matching nothing. Such a layer gets a source transform naming its axes x, y, z (in the order
the array holds them) with a voxel size and offset: those of the dataset in the same view that
was converted from it (its manifest names the source and the axes it was read with), else the
first layer's that has its own.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardwright.common import deadlines
from shardwright.common.vocabulary import VolumeType, names
from shardwright.errors import ShardwrightError, ShardwrightWarning
from shardwright.formats.precomputed.annotations import ANNOTATIONS_TYPE
from shardwright.formats.precomputed.info import LABEL_DTYPES
from shardwright.lifecycle.manifest import read_manifest
from shardwright.sources import open_source
from shardwright.sources.tensorstore_array import endpoint_url
from shardwright.stores import Store, open_store

# What sits at a dataset's root, and the Neuroglancer data source scheme that reads it.
DATA_SCHEMES = (
    ("info", "precomputed"),
    ("zarr.json", "zarr3"),
    (".zarray", "zarr2"),
    (".zgroup", "zarr2"),
    ("attributes.json", "n5"),
)
ZARR_SCHEMES = ("zarr2", "zarr3")  # arrays that may hold no voxel size
REMOTE = ("gs://", "s3://", "http://", "https://")  # Neuroglancer reads these itself
# The hosts of the clouds whose gs:// and s3:// URLs Neuroglancer resolves itself; a bucket
# behind any other endpoint (MinIO, Ceph, an emulator) is read at its URL there.
CLOUD_HOSTS = {"gs://": "googleapis.com", "s3://": "amazonaws.com"}
NEUROGLANCER_APP = "https://neuroglancer-demo.appspot.com/"  # a public deployment of the client
SAMPLE_EDGE = 64  # voxels per axis read from each dataset's centre for contrast and segments
SHOWN_SEGMENTS = 8
PANEL_PIXELS = 480  # the data's width in x or y fills about this many screen pixels


class ViewError(ShardwrightError, ValueError):
    """A dataset that cannot be viewed, or no Neuroglancer client to view it with."""


@dataclass(frozen=True)
class DatasetLayer:
    """What the viewer state needs to know of one dataset."""

    name: str
    location: str  # the dataset's folder or URL
    source: str  # the Neuroglancer data source URL
    metadata_key: str  # the object at its root that says what it is (info, zarr.json, ...)
    layer_type: str  # image | segmentation
    resolution_nm: tuple[float, float, float]
    voxel_offset: tuple[int, int, int]
    size: tuple[int, int, int]
    contrast: tuple[float, float] | None
    segments: tuple[int, ...]
    # A bare array's axes in its own order (e.g. "zyx") and the names Neuroglancer gives its
    # dimensions: it finds no voxel size in the array's metadata, so the state places it by a
    # source transform with `resolution_nm` and `voxel_offset`. None where metadata places it.
    array_axes: str | None = None
    array_dimensions: tuple[str, ...] = ()
    converted_from: str | None = None  # ours: the location of the source it was converted from
    relationships: tuple[str, ...] = ()  # an annotation layer's, linked to a segmentation

    @property
    def centre(self) -> list[float]:
        return [o + s / 2 for o, s in zip(self.voxel_offset, self.size, strict=True)]


def describe_all(
    places: Sequence[str], source_urls: Sequence[str], storage_options: dict[str, Any] | None
) -> list[DatasetLayer]:
    """The layers of the datasets at `places`, read by Neuroglancer at `source_urls`, each
    source of a conversion in the view read with the axes the conversion read it with, and
    every bare array placed (`place`)."""
    plans = []  # ours: the plan in each manifest says what the layer is and what it was from
    for dest in places:
        manifest = read_manifest(open_store(dest, storage_options))
        plans.append(manifest.plan if manifest is not None else {})
    read_as = {  # a source's location -> the axes its conversion in this view read it with
        _same_place(plan["source"]): plan["source_axes"]
        for plan in plans
        if isinstance(plan.get("source"), str) and isinstance(plan.get("source_axes"), str)
    }
    layers = [
        describe(dest, url, plan, storage_options, axes=read_as.get(_same_place(dest)))
        for dest, url, plan in zip(places, source_urls, plans, strict=True)
    ]
    return place(layers)


def describe(
    dest: str,
    source_url: str,
    plan: dict[str, Any],
    storage_options: dict[str, Any] | None = None,
    axes: str | None = None,
) -> DatasetLayer:
    """The layer of the dataset at `dest` (a local folder or a remote URL; `plan`, its
    manifest's plan where it is ours, else empty), which Neuroglancer reads at `source_url`
    (where the data server serves it, or the bucket's own URL); `axes`, for a zarr array, the
    order its dimensions hold x, y, z (default: its metadata's, else zyx)."""
    store = open_store(dest, storage_options)
    metadata_key, scheme = data_scheme(store, dest)
    annotations = _annotation_layer(store, dest, source_url, scheme)
    if annotations is not None:
        return annotations
    source = open_source(
        dest, axes=axes if scheme in ZARR_SCHEMES else None, storage_options=storage_options
    )
    layer_type = source.hints.layer_type or plan.get("layer_type")
    if layer_type is None:  # a source that does not say: as planning decides it
        layer_type = "segmentation" if np.dtype(source.dtype) in LABEL_DTYPES else "image"
    if layer_type not in names(VolumeType):
        layer_type = "image"
    sample = _centre_sample(source)
    # Selected segments are all a segmentation layer shows, in 2-D too: select a few only where
    # meshes or skeletons make them worth picking out.
    select = layer_type == "segmentation" and scheme == "precomputed" and _has_objects(store)
    bare = scheme in ZARR_SCHEMES and source.hints.resolution is None
    converted_from = plan.get("source")
    return DatasetLayer(
        name=os.path.basename(os.path.normpath(dest.rstrip("/"))) or dest,
        location=dest,
        source=f"{scheme}://{source_url.rstrip('/')}/",
        metadata_key=metadata_key,
        layer_type=layer_type,
        resolution_nm=source.hints.resolution or (1.0, 1.0, 1.0),
        voxel_offset=source.hints.voxel_offset or (0, 0, 0),
        size=source.shape_xyz,
        contrast=_contrast(sample) if layer_type == "image" else None,
        segments=_segments(sample) if select else (),
        array_axes=source.axes if bare else None,
        array_dimensions=dimension_names(store, scheme, len(source.axes)) if bare else (),
        converted_from=_same_place(converted_from) if isinstance(converted_from, str) else None,
    )


def _annotation_layer(store: Store, dest: str, source_url: str, scheme: str) -> DatasetLayer | None:
    """The layer of a precomputed annotation collection (None for anything else): placed
    by its info's dimensions and bounds."""
    if scheme != "precomputed":
        return None
    try:
        info = json.loads(store.read("info", small=True))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("@type") != ANNOTATIONS_TYPE:
        return None
    scales = [float(scale) * 1e9 for scale, _ in info["dimensions"].values()]
    lower = [math.floor(v) for v in info["lower_bound"]]
    upper = [math.ceil(v) for v in info["upper_bound"]]
    return DatasetLayer(
        name=os.path.basename(os.path.normpath(dest.rstrip("/"))) or dest,
        location=dest,
        source=f"precomputed://{source_url.rstrip('/')}/",
        metadata_key="info",
        layer_type="annotation",
        resolution_nm=(scales[0], scales[1], scales[2]),
        voxel_offset=(lower[0], lower[1], lower[2]),
        size=(upper[0] - lower[0], upper[1] - lower[1], upper[2] - lower[2]),
        contrast=None,
        segments=(),
        relationships=tuple(str(r["id"]) for r in info.get("relationships", [])),
    )


def place(layers: Sequence[DatasetLayer]) -> list[DatasetLayer]:
    """`layers` with each bare array given the voxel size and offset of its conversion in the
    view, else the voxel size of the first layer placed by its own metadata (else 1 nm)."""
    placed = [layer for layer in layers if layer.array_axes is None]
    out = []
    for layer in layers:
        if layer.array_axes is not None:
            here = _same_place(layer.location)
            conversion = next((p for p in placed if p.converted_from == here), None)
            if conversion is not None:
                layer = replace(
                    layer,
                    resolution_nm=conversion.resolution_nm,
                    voxel_offset=conversion.voxel_offset,
                )
            elif placed:
                layer = replace(layer, resolution_nm=placed[0].resolution_nm)
        out.append(layer)
    return out


def dimension_names(store: Store, scheme: str, rank: int) -> tuple[str, ...]:
    """The names Neuroglancer gives a zarr array's dimensions: its `dimension_names` (v3) or
    `_ARRAY_DIMENSIONS` attribute (v2), a missing one `dim_<i>` (v3) or `d<i>` (v2), a
    repeated one suffixed 1, 2, ... (a source transform must name them as it does)."""
    if scheme == "zarr3":
        given, prefix = json.loads(store.read("zarr.json")).get("dimension_names"), "dim_"
    else:
        attributes = json.loads(store.read(".zattrs")) if store.exists(".zattrs") else {}
        given, prefix = attributes.get("_ARRAY_DIMENSIONS"), "d"
    if not isinstance(given, list) or len(given) != rank:
        given = [None] * rank
    seen: list[str] = []
    for i, name in enumerate(given):
        candidates: Iterator[str]
        if isinstance(name, str):
            candidates = itertools.chain([name], (f"{name}{j}" for j in itertools.count(1)))
        else:
            candidates = (f"{prefix}{j}" for j in itertools.count(i))
        seen.append(next(c for c in candidates if c not in seen))
    return tuple(seen)


def _same_place(location: str) -> str:
    """A location as another dataset's manifest would name it."""
    return location.removeprefix("file://").rstrip("/")


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


def warn_unreadable(layers: Sequence[DatasetLayer], origin: str) -> None:
    """Warn of each remote layer that Neuroglancer, reading without credentials from a page at
    `origin`, will be refused: else the layer stays empty with no word why."""
    for layer in layers:
        url = layer.source.split("://", 1)[1]
        if layer.location.startswith(REMOTE) and url.startswith(("http://", "https://")):
            problem = public_read_problem(f"{url.rstrip('/')}/{layer.metadata_key}", origin)
            if problem is not None:
                warnings.warn(ShardwrightWarning(problem), stacklevel=3)


def public_read_problem(url: str, origin: str) -> str | None:
    """Why a browser page at `origin` cannot read `url` without credentials (refused, or
    answered without CORS for that origin), or None where it can."""
    request = urllib.request.Request(url, headers={"Origin": origin, "Range": "bytes=0-0"})
    try:
        with urllib.request.urlopen(request, timeout=deadlines.timeout()) as response:
            allowed = response.headers.get("Access-Control-Allow-Origin")
            response.read(1)
    except urllib.error.HTTPError as exc:
        refused = f"HTTP {exc.code}"
    except OSError as exc:
        refused = f"{type(exc).__name__}: {exc}"
    else:
        if allowed in ("*", origin):
            return None
        return (
            f"{url}: answered without CORS for the viewer's origin ({origin}), so the browser "
            "keeps what it reads from Neuroglancer: the layer will stay empty. Give the bucket "
            "a CORS rule allowing GET from any origin (or this one)"
        )
    return (
        f"{url}: not readable without credentials ({refused}), and Neuroglancer reads "
        "without them: the layer will stay empty. Make the dataset public (a bucket policy "
        "allowing anonymous reads, and CORS for the viewer's origin), or copy it here"
    )


def bucket_url(dest: str, storage_options: dict[str, Any] | None) -> str:
    """Where Neuroglancer reads a remote dataset: its URL as given (Neuroglancer resolves gs://
    and s3:// on Google's and Amazon's clouds itself), or, for a bucket behind another endpoint
    (MinIO, Ceph, an emulator), the bucket's path-style URL there."""
    endpoint = endpoint_url(storage_options)
    if not endpoint:
        return dest
    host = urllib.parse.urlsplit(str(endpoint)).hostname or ""
    for scheme, cloud in CLOUD_HOSTS.items():
        if dest.startswith(scheme) and not host.endswith(cloud):
            return f"{str(endpoint).rstrip('/')}/{dest.removeprefix(scheme)}"
    return dest


def is_remote(dest: str) -> bool:
    return dest.startswith(REMOTE)


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
            "source": data_source(layer),
            "name": layer.name,
        }
        if layer.contrast is not None:
            entry["shaderControls"] = {"normalized": {"range": list(layer.contrast)}}
        if layer.segments:
            entry["segments"] = [str(s) for s in layer.segments]
        segmentation = next((o.name for o in layers if o.layer_type == "segmentation"), None)
        if layer.relationships and segmentation is not None:  # select a segment: its rows
            entry["linkedSegmentationLayer"] = {r: segmentation for r in layer.relationships}
            entry["filterBySegmentation"] = list(layer.relationships)
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


def data_source(layer: DatasetLayer) -> str | dict[str, Any]:
    """A layer's source in the state: its URL, or for a bare array the URL with the transform
    naming its dimensions x, y, z (a channel axis c^) at its voxel size and offset."""
    if layer.array_axes is None:
        return layer.source
    scale = dict(zip("xyz", layer.resolution_nm, strict=True))
    offset = dict(zip("xyz", layer.voxel_offset, strict=True))
    axes = layer.array_axes
    units = [[scale[a] * 1e-9, "m"] if a in scale else [1, ""] for a in axes]
    # The input dimensions carry the voxel size too: from a unitless input Neuroglancer does not
    # map one voxel to one output voxel.
    inputs = dict(zip(layer.array_dimensions, units, strict=True))
    # Channels a channel dimension (c^), a single time point a local one (t').
    names = {"c": "c^", "t": "t'"}
    outputs = {names.get(a, a): unit for a, unit in zip(axes, units, strict=True)}
    matrix = [
        [float(row == column) for column in range(len(axes))] + [float(offset.get(a, 0))]
        for row, a in enumerate(axes)
    ]
    transform = {"outputDimensions": outputs, "inputDimensions": inputs, "matrix": matrix}
    return {"url": layer.source, "transform": transform}


def neuroglancer_link(state: dict[str, Any], app: str = NEUROGLANCER_APP) -> str:
    """The view as a plain Neuroglancer link: the state in the URL fragment, which any
    deployment of the client opens (local layers while this process serves them)."""
    return f"{app}#!{urllib.parse.quote(json.dumps(state, separators=(',', ':')), safe='')}"
