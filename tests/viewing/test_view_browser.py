"""The Neuroglancer client itself reading our output, in headless Chromium (SwiftShader
WebGL): each screenshot of our dataset must equal, pixel for pixel, the screenshot of the same
voxels written by TensorStore under the same viewer state; a missing dataset and a truncated
shard must not. Screenshots are kept under the test's tmp dir and named in the log.

Skips, saying why, where Chromium, its driver or the `view` extra is missing (CI installs
them: Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import copy
import io
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.cli.demo import write_demo_volumes
from shardwright.errors import ShardwrightWarning
from shardwright.formats.precomputed.meshes import MultiLodManifest
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.stores import open_store
from shardwright.viewing.serve import make_server
from shardwright.viewing.viewer import ViewError, capture_png, headless_browser, open_view
from tests.support import label_shapes
from tests.support.browser import NEEDS_BROWSER
from tests.support.segment_objects import write_multilod_meshes, write_segmentation, write_skeletons

pytestmark = NEEDS_BROWSER

SIZE_XYZ = (128, 128, 24)
RESOLUTION = (8, 8, 40)
SHOT = (384, 384)


@pytest.fixture(scope="module")
def volumes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("browser")
    write_demo_volumes(SIZE_XYZ, str(root / "image.npy"), str(root / "labels.npy"))
    image = np.load(root / "image.npy")
    labels = np.load(root / "labels.npy")
    common = dict(
        scheduler="sync", progress=False, resolution=RESOLUTION, chunk_size=(32, 32, 8),
        target_shard_bytes=64 * 1024,
    )  # fmt: skip
    api.convert(str(root / "image.npy"), str(root / "ours-image"), **common)
    api.convert(
        str(root / "labels.npy"), str(root / "ours-seg"), layer_type="segmentation",
        encoding="compressed_segmentation", **common,
    )  # fmt: skip
    for location in ("end", "start"):
        api.convert(
            str(root / "image.npy"), str(root / f"ours-image-{location}.zarr"), format="zarr3",
            index_location=location, **common,
        )  # fmt: skip
    _tensorstore_precomputed(root / "ts-image", image, "image", "raw")
    _tensorstore_precomputed(root / "ts-seg", labels, "segmentation", "compressed_segmentation")
    _tensorstore_zarr3(root / "ts-image.zarr", image)
    # Segments 1-4 with unsharded multi-resolution Draco meshes and skeletons, and our sharded
    # conversion of them.
    write_segmentation(root / "unsharded-objects", "mesh", "skeletons")
    segments = np.arange(1, 5, dtype=np.uint64)
    write_multilod_meshes(root / "unsharded-objects" / "mesh", segments, origin_high=4.0)
    write_skeletons(root / "unsharded-objects" / "skeletons", segments, vertex_types=False)
    api.convert(
        str(root / "unsharded-objects"), str(root / "ours-objects"), with_meshes=True,
        with_skeletons=True, scheduler="sync", progress=False,
    )  # fmt: skip
    # Meshes and skeletons generated in the conversion of a CloudVolume segmentation, and
    # their unsharded twin.
    labels_url = label_shapes.write_precomputed(root / "shapes")
    api.convert(
        labels_url, str(root / "ours-generated"), generate_meshes=True, generate_skeletons=True,
        mesh_block=(32, 32, 32), scheduler="sync", progress=False,
    )  # fmt: skip
    _unsharded_twin(root / "ours-generated", root / "unsharded-generated")
    # An OME-Zarr pyramid of two levels; TensorStore's twin gets level 1 from numpy.
    api.convert(
        str(root / "image.npy"), str(root / "ours-pyramid.zarr"), format="zarr3", mips=1,
        factor=(2, 2, 2), **common,
    )  # fmt: skip
    _tensorstore_zarr3(root / "ts-pyramid.zarr", image, _average_2x(image))
    _tensorstore_zarr3(root / "ts-base-only.zarr", image)
    return {"root": root}


def _unsharded_twin(ours: pathlib.Path, twin: pathlib.Path) -> None:
    """A copy of `ours` whose meshes and skeletons are stored unsharded, object by object,
    read out of our shards as a reader does (the fragment data lies right before each
    manifest)."""
    shutil.copytree(ours, twin, ignore=shutil.ignore_patterns("mesh", "skeletons"))
    for sub in ("mesh", "skeletons"):
        info = json.loads((ours / sub / "info").read_text())
        reader = ShardedReader(ShardingSpec.from_json(info.pop("sharding")),
                               open_store(str(ours / sub)).read_range)  # fmt: skip
        (twin / sub).mkdir()
        (twin / sub / "info").write_text(json.dumps(info))
        for segment in label_shapes.SEGMENTS.values():
            blob = reader.read(segment)
            assert blob is not None
            if sub == "skeletons":
                (twin / sub / str(segment)).write_bytes(blob)
                continue
            key, start, _ = reader.locate(segment)  # type: ignore[misc]
            size = MultiLodManifest.from_bytes(blob).data_nbytes
            (twin / sub / f"{segment}.index").write_bytes(blob)
            (twin / sub / str(segment)).write_bytes(
                (ours / sub / key).read_bytes()[start - size : start]
            )


def _average_2x(zyx: np.ndarray) -> np.ndarray:
    """Each 2x2x2 block's mean, rounded half up: the pyramid's average for uint8."""
    z, y, x = zyx.shape
    blocks = zyx.reshape(z // 2, 2, y // 2, 2, x // 2, 2).astype(np.uint32)
    return ((blocks.sum(axis=(1, 3, 5)) + 4) // 8).astype(zyx.dtype)


def _tensorstore_precomputed(dest: pathlib.Path, zyx: np.ndarray, kind: str, encoding: str) -> None:
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{dest}/",
            "multiscale_metadata": {
                "type": kind, "data_type": str(zyx.dtype), "num_channels": 1,
            },
            "scale_metadata": {
                "size": list(SIZE_XYZ), "resolution": list(RESOLUTION), "encoding": encoding,
                "chunk_size": [32, 32, 8],
            },
            "create": True,
        }
    ).result()  # fmt: skip
    store[...].write(zyx.T[..., None]).result()


def _tensorstore_zarr3(dest: pathlib.Path, *levels: np.ndarray) -> None:
    """The same voxels, unsharded, chunked alike, as the levels 0, 1, ... of an OME-Zarr group
    whose metadata is written here by hand from the OME-Zarr 0.5 specification (level k's
    voxel centres sit (2**k - 1) / 2 base voxels in)."""
    datasets = []
    for k, zyx in enumerate(levels):
        store = ts.open(
            {
                "driver": "zarr3", "kvstore": f"file://{dest}/{k}/", "create": True,
                "metadata": {
                    "shape": list(zyx.shape), "data_type": "uint8",
                    "chunk_grid": {
                        "name": "regular", "configuration": {"chunk_shape": [8, 32, 32]},
                    },
                    "dimension_names": ["z", "y", "x"],
                },
            }
        ).result()  # fmt: skip
        store.write(zyx).result()
        voxel = [r * 2**k for r in RESOLUTION[::-1]]
        shift = [(v - r) / 2 for v, r in zip(voxel, RESOLUTION[::-1], strict=True)]
        datasets.append(
            {
                "path": str(k),
                "coordinateTransformations": [
                    {"type": "scale", "scale": voxel},
                    {"type": "translation", "translation": shift},
                ],
            }
        )
    axes = [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"]
    group = {
        "zarr_format": 3, "node_type": "group",
        "attributes": {
            "ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}
        },
    }  # fmt: skip
    (dest / "zarr.json").write_text(json.dumps(group))


@pytest.fixture(scope="module")
def browser(volumes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One data server (every folder of `volumes` and of later tests under /data/<name>/), one
    viewer and one headless Chromium for the module: each render only changes the state."""
    import neuroglancer

    extra = tmp_path_factory.mktemp("broken")
    server = make_server(routes={"/data": str(volumes["root"]), "/broken": str(extra)}, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    neuroglancer.set_server_bind_address("127.0.0.1", 0)
    viewer = neuroglancer.Viewer()
    try:
        with headless_browser(viewer):
            yield {"viewer": viewer, "server": server, "broken": extra}
    finally:
        server.shutdown()
        server.server_close()
        neuroglancer.stop()


Render = Callable[..., np.ndarray]


@pytest.fixture()
def render(browser: dict[str, Any], tmp_path: pathlib.Path, keep_screenshot: Any) -> Render:
    """render(state, source, name, timeout=120): `state` with its first layer's source at
    `source` (a path on the data server; None: as the state has it), rendered; the PNG kept
    as `name`.png in the test's tmp dir and listed at the end of the report."""
    from PIL import Image

    def run(
        state: dict[str, Any], source: str | None, name: str, timeout: float = 120
    ) -> np.ndarray:
        state = copy.deepcopy(state)
        if source is not None:
            _point(state["layers"][0], f"{browser['server'].url}/{source}")
        viewer = browser["viewer"]
        viewer.set_state(state)
        png = capture_png(viewer, SHOT, timeout)
        path = tmp_path / f"{name}.png"
        path.write_bytes(png)
        keep_screenshot(path)
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    return run


def _point(layer: dict[str, Any], url: str) -> None:
    """Make `layer` read its data at `url`, with the scheme and transform it has."""
    source = layer["source"]
    address = source["url"] if isinstance(source, dict) else source
    pointed = f"{address.split('://', 1)[0]}://{url}/"
    if isinstance(source, dict):
        source["url"] = pointed
    else:
        layer["source"] = pointed


def _state_of(folder: pathlib.Path, layout: str = "xy") -> dict[str, Any]:
    """The state `view` builds for one of our datasets, in one panel."""
    view = open_view([str(folder)])
    try:
        state = copy.deepcopy(view.state)
    finally:
        view.close()
    state["layout"] = layout
    return state


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("ours-image", "ts-image"),
        ("ours-seg", "ts-seg"),
        ("ours-image-end.zarr", "ts-image.zarr"),
        ("ours-image-start.zarr", "ts-image.zarr"),
    ],
)
def test_neuroglancer_shows_our_output_exactly_as_tensorstores(
    volumes: dict[str, Any], render: Render, ours: str, theirs: str
) -> None:
    state = _state_of(volumes["root"] / ours)
    mine = render(state, f"data/{ours}", ours)
    reference = render(state, f"data/{theirs}", theirs)
    background = mine[0, 0]
    assert (mine != background).any(axis=-1).mean() > 0.3  # the data is on screen
    assert mine.shape == reference.shape
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"


def test_sharded_meshes_and_skeletons_show_as_the_unsharded_ones(
    volumes: dict[str, Any], render: Render
) -> None:
    state = _state_of(volumes["root"] / "ours-objects", layout="xy-3d")
    assert {int(s) for s in state["layers"][0]["segments"]} <= {1, 2, 3, 4}
    state["layers"][0]["segments"] = ["1", "2", "3", "4"]  # every segment's mesh and skeleton
    mine = render(state, "data/ours-objects", "ours-objects")
    reference = render(state, "data/unsharded-objects", "unsharded-objects")
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"
    state["layers"][0]["segments"] = []
    bare = render(state, "data/ours-objects", "no-segment-selected")
    assert not np.array_equal(mine, bare)  # the meshes and skeletons are on screen


def test_generated_meshes_and_skeletons_show_as_their_unsharded_twin(
    volumes: dict[str, Any], render: Render
) -> None:
    """Neuroglancer's 3-D panel draws the meshes and skeletons the job generated, sharded,
    exactly as the same objects stored one file each."""
    state = _state_of(volumes["root"] / "ours-generated", layout="3d")
    state["layers"][0]["segments"] = [str(s) for s in label_shapes.SEGMENTS.values()]
    mine = render(state, "data/ours-generated", "ours-generated")
    reference = render(state, "data/unsharded-generated", "unsharded-generated")
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"
    state["layers"][0]["segments"] = []
    bare = render(state, "data/ours-generated", "generated-none-selected")
    assert (mine != bare).any(axis=-1).mean() > 0.02  # the objects are on screen


def test_meshes_and_skeletons_added_in_place_to_a_cloudvolume_dataset_show(
    volumes: dict[str, Any], render: Render
) -> None:
    """`convert PATH --generate-meshes --generate-skeletons` on a segmentation CloudVolume
    wrote: `view PATH` then selects its segments, and Neuroglancer's 3-D panel draws the
    added meshes and skeletons exactly as those generated in a conversion of the same labels.
    The controls: the dataset as it was before draws only its bounding box (its view selects
    nothing), and each of the mesh and the skeleton, drawn alone, is on screen where the object
    is."""
    root = volumes["root"]
    label_shapes.write_precomputed(root / "added-in-place")
    shutil.copytree(root / "added-in-place", root / "before-addition")
    done = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", str(root / "added-in-place"),
         "--generate-meshes", "--generate-skeletons", "--mesh-block", "32,32,32",
         "--scheduler", "sync", "--quiet"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "segments" not in _state_of(root / "before-addition")["layers"][0]
    state = _state_of(root / "added-in-place", layout="3d")
    layer = state["layers"][0]
    assert {int(s) for s in layer["segments"]} == set(label_shapes.SEGMENTS.values())
    added = render(state, "data/added-in-place", "added-in-place")
    before = render(state, "data/before-addition", "before-addition")
    assert (added != before).any(axis=-1).mean() > 0.02  # the objects are on screen
    generated = render(state, "data/ours-generated", "generated-in-a-conversion")
    assert np.array_equal(added, generated), f"{(added != generated).any(-1).sum()} pixels differ"
    # Each alone (the other's subsource off): the skeletons, lines hidden inside the meshes
    # when both are drawn, run within the meshes' outline.
    layer["source"] = {"url": layer["source"], "subsources": {"skeletons": False}}
    meshes = render(state, "data/added-in-place", "added-meshes-alone")
    layer["source"]["subsources"] = {"mesh": False}
    skeletons = render(state, "data/added-in-place", "added-skeletons-alone")
    drawn_mesh = (meshes != before).any(axis=-1)
    drawn_skeleton = (skeletons != before).any(axis=-1)
    assert drawn_mesh.mean() > 0.02 and drawn_skeleton.sum() > 100
    assert drawn_skeleton.sum() < drawn_mesh.sum() / 4  # lines: the mesh was off
    assert (drawn_skeleton & ~drawn_mesh).sum() < 0.05 * drawn_skeleton.sum()


def test_an_ome_zarr_pyramid_level_shows_as_tensorstores(
    volumes: dict[str, Any], render: Render
) -> None:
    state = _state_of(volumes["root"] / "ours-pyramid.zarr")
    state["crossSectionScale"] = 8.0  # 8 base voxels a pixel: Neuroglancer draws level 1
    mine = render(state, "data/ours-pyramid.zarr", "ours-pyramid")
    reference = render(state, "data/ts-pyramid.zarr", "ts-pyramid")
    assert np.array_equal(mine, reference), f"{(mine != reference).any(-1).sum()} pixels differ"
    base = render(state, "data/ts-base-only.zarr", "ts-base-only")
    assert not np.array_equal(mine, base)  # level 1 was drawn, not the base


def _does_not_match(
    render: Render, state: dict[str, Any], source: str, name: str, reference: np.ndarray
) -> bool:
    """Whether the view of `source` fails to show `reference`: it never finishes loading, or
    it finishes showing something else."""
    try:  # a view that loads answers in 1-3 s here: 8 s without an answer is "never"
        shown = render(state, source, name, timeout=8)
    except ViewError as error:
        print(f"{name}: {error}")
        return True
    return not np.array_equal(shown, reference)


def test_a_missing_dataset_and_a_truncated_shard_do_not_pass(
    volumes: dict[str, Any], browser: dict[str, Any], render: Render
) -> None:
    """Negative controls: the comparison above must be able to fail."""
    root = volumes["root"]
    state = _state_of(root / "ours-image")
    reference = render(state, "data/ts-image", "reference")
    assert _does_not_match(render, state, "data/nothing-here", "missing", reference)
    broken = browser["broken"] / "truncated"
    shutil.copytree(root / "ours-image", broken)
    for shard in broken.rglob("*.shard"):
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert _does_not_match(render, state, "broken/truncated", "truncated", reference)
    # the view comes back once the data is whole again: the failures above were the data's
    again = render(state, "data/ours-image", "whole-again")
    assert np.array_equal(again, reference)


def test_a_screenshot_into_a_folder_not_there_yet_makes_it(
    volumes: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """`view --screenshot shots/deep/x.png`: the folders are made (it failed with a bare
    errno), and the file is a PNG of the view."""
    from shardwright.cli import main

    target = tmp_path / "shots" / "deep" / "x.png"
    assert main(["view", str(volumes["root"] / "ours-image"), "--screenshot", str(target)]) == 0
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_view_src_dest_shows_another_tools_dataset_beside_ours_exactly(
    volumes: dict[str, Any], render: Render, browser: dict[str, Any]
) -> None:
    """`view SRC DEST` with SRC written by TensorStore (no manifest): one state, both layers
    placed by their own metadata; each shown alone draws the same pixels."""
    root = volumes["root"]
    view = open_view([str(root / "ts-image"), str(root / "ours-image")])
    try:
        state = copy.deepcopy(view.state)
    finally:
        view.close()
    assert [layer["name"] for layer in state["layers"]] == ["ts-image", "ours-image"]
    state["layout"] = "xy"
    theirs, ours = state["layers"]
    _point(ours, f"{browser['server'].url}/data/ours-image")
    ours["visible"] = False
    source_alone = render(state, "data/ts-image", "src-alone")
    ours["visible"], theirs["visible"] = True, False
    dest_alone = render(state, "data/ts-image", "dest-alone")
    assert (source_alone != source_alone[0, 0]).any(axis=-1).mean() > 0.3  # data on screen
    assert np.array_equal(source_alone, dest_alone), (
        f"{(source_alone != dest_alone).any(-1).sum()} pixels differ"
    )


@pytest.mark.parametrize("axes", ["xyz", "czyx"])
def test_view_src_dest_places_a_bare_array_where_its_conversion_is(
    volumes: dict[str, Any], render: Render, browser: dict[str, Any], axes: str
) -> None:
    """`view SRC DEST` with SRC a zarr array holding no voxel size (v2 stored x-major, read
    with --source-axes xyz; v3 of two channels, c first) and DEST its conversion at 8x8x40 nm
    from voxel (8, 16, 4): shown alone, each draws the same pixels at the same place. Without
    its transform SRC's layer does not (the control)."""
    import zarr

    root = volumes["root"]
    zyx = np.load(root / "image.npy")
    if axes == "xyz":
        voxels, chunks, version = zyx.transpose(2, 1, 0), (32, 32, 8), 2
    else:
        voxels, chunks, version = np.stack([zyx, 255 - zyx]), (2, 8, 32, 32), 3
    name = f"bare-{axes}.zarr"
    array = zarr.create_array(str(root / name), shape=voxels.shape, chunks=chunks,
                              dtype="uint8", zarr_format=version)  # fmt: skip
    array[...] = voxels
    api.convert(
        str(root / name), str(root / f"{name}-dest"), source_axes=axes,
        resolution=RESOLUTION, voxel_offset=(8, 16, 4), chunk_size=(32, 32, 8),
        scheduler="sync", progress=False,
    )  # fmt: skip
    view = open_view([str(root / name), str(root / f"{name}-dest")])
    try:
        state = copy.deepcopy(view.state)
    finally:
        view.close()
    # Whole screen pixels per voxel: where a pixel straddles a voxel edge, layers of two formats
    # can round it apart at chunk edges (a column a chunk, seen at the default 3.75 px/voxel).
    state["layout"], state["crossSectionScale"] = "xy", 0.25
    source, dest = state["layers"]
    _point(source, f"{browser['server'].url}/data/{name}")
    _point(dest, f"{browser['server'].url}/data/{name}-dest")
    dest["visible"] = False
    source_alone = render(state, None, f"{name}-alone")
    dest["visible"], source["visible"] = True, False
    dest_alone = render(state, None, f"{name}-dest-alone")
    assert (dest_alone != dest_alone[0, 0]).any(axis=-1).mean() > 0.3  # data on screen
    assert np.array_equal(source_alone, dest_alone), (
        f"{(source_alone != dest_alone).any(-1).sum()} pixels differ"
    )
    source["visible"], dest["visible"] = True, False
    source["source"] = source["source"]["url"]  # as Neuroglancer would place it unaided
    unplaced = render(state, None, f"{name}-unplaced", timeout=30)
    assert not np.array_equal(unplaced, dest_alone)


def test_view_src_dest_places_a_translated_ome_zarr_where_its_conversion_is(
    volumes: dict[str, Any], render: Render, browser: dict[str, Any]
) -> None:
    """`view SRC DEST` with SRC an OME-Zarr 0.5 image written by ome-zarr-py at 8x8x40 nm
    from (400, 80, 160) nm, in micrometres, and DEST its zarr3 conversion: shown alone, each
    draws the same pixels at the same place. A conversion that dropped the translation (the
    control, written with --voxel-offset 0,0,0) does not."""
    import zarr
    from ome_zarr.format import FormatV05
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_multiscale

    root = volumes["root"]
    zyx = np.load(root / "image.npy")
    source = root / "translated.ome.zarr"
    group = zarr.group(store=parse_url(str(source), mode="w", fmt=FormatV05()).store)
    write_multiscale(
        [zyx], group, fmt=FormatV05(),
        axes=[{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"],
        coordinate_transformations=[[
            {"type": "scale", "scale": [0.04, 0.008, 0.008]},
            {"type": "translation", "translation": [0.16, 0.08, 0.4]},
        ]],
        storage_options={"chunks": (8, 64, 64)},
    )  # fmt: skip
    common = dict(format="zarr3", chunk_size=(32, 32, 8), scheduler="sync", progress=False)
    api.convert(str(source), str(root / "translated-dest"), **common)
    api.convert(str(source), str(root / "untranslated-dest"), voxel_offset=(0, 0, 0), **common)
    view = open_view([str(source), str(root / "translated-dest")])
    try:
        state = copy.deepcopy(view.state)
    finally:
        view.close()
    # Centred on the source where it lies: voxel (50, 10, 4) + half its size.
    assert state["position"][:2] == [50 + SIZE_XYZ[0] / 2, 10 + SIZE_XYZ[1] / 2]
    state["layout"] = "xy"
    src, dest = state["layers"]
    _point(src, f"{browser['server'].url}/data/translated.ome.zarr")
    _point(dest, f"{browser['server'].url}/data/translated-dest")
    dest["visible"] = False
    source_alone = render(state, None, "translated-src-alone")
    dest["visible"], src["visible"] = True, False
    dest_alone = render(state, None, "translated-dest-alone")
    assert (dest_alone != dest_alone[0, 0]).any(axis=-1).mean() > 0.3  # data on screen
    assert np.array_equal(source_alone, dest_alone), (
        f"{(source_alone != dest_alone).any(-1).sum()} pixels differ"
    )
    _point(dest, f"{browser['server'].url}/data/untranslated-dest")
    misplaced = render(state, None, "untranslated-dest-alone")
    assert not np.array_equal(misplaced, source_alone)


def test_datasets_in_public_buckets_render_where_they_are(
    volumes: dict[str, Any], render: Render, s3: Any, gcs: Any
) -> None:
    """A dataset in an S3 bucket (moto) and one in a GCS bucket (the emulator, answering CORS
    as GCS does), each public with a CORS rule: `view` warns of nothing, its state reads the
    bucket, and Neuroglancer draws exactly what it draws of the same dataset served here."""
    import boto3

    root = volumes["root"]
    common = dict(
        scheduler="sync", progress=False, resolution=RESOLUTION, chunk_size=(32, 32, 8),
        target_shard_bytes=64 * 1024,
    )  # fmt: skip
    s3.make_bucket("public-s3")
    client = boto3.client("s3", endpoint_url=s3.endpoint)
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::public-s3/*",
    }]}  # fmt: skip
    client.put_bucket_policy(Bucket="public-s3", Policy=json.dumps(policy))
    client.put_bucket_cors(Bucket="public-s3", CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": ["*"], "AllowedMethods": ["GET", "HEAD"], "AllowedHeaders": ["*"],
    }]})  # fmt: skip
    gcs.make_bucket("public-gs")
    cors = [{"origin": ["*"], "method": ["GET", "HEAD"], "responseHeader": ["Content-Range"]}]
    patch = urllib.request.Request(
        f"{gcs.endpoint}/storage/v1/b/public-gs", method="PATCH",
        data=json.dumps({"cors": cors}).encode(), headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(patch, timeout=10).read()
    local = render(_state_of(root / "ours-image"), "data/ours-image", "bucket-reference")
    assert (local != local[0, 0]).any(axis=-1).mean() > 0.3  # data on screen
    for url, options in (
        ("s3://public-s3/em", s3.options()),
        ("gs://public-gs/em", gcs.options(gcs.conformant_endpoint)),
    ):
        api.convert(str(root / "image.npy"), url, storage_options=options, **common)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ShardwrightWarning)  # readable as Neuroglancer reads
            view = open_view([url], storage_options=options)
        try:
            state = copy.deepcopy(view.state)
        finally:
            view.close()
        state["layout"] = "xy"
        assert state["layers"][0]["source"].endswith(f"/{url.split('://')[1]}/")
        shown = render(state, None, url.split(":")[0] + "-bucket")
        assert np.array_equal(shown, local), f"{url}: {(shown != local).any(-1).sum()} differ"
