"""The README's main job: make a demo volume, convert it to both formats, verify, show it.

The demo is an EM-like uint8 image and a uint64 segmentation of the same field (a few hundred
MB at most), converted on the embedded default (a local Dask cluster) to sharded precomputed
(raw+gzip image, compressed_segmentation labels) and to sharded zarr3, then verified against
the sources.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import time
from typing import Any

import numpy as np

from shardwright import api
from shardwright.errors import DestinationError
from shardwright.version import install_command

RESOLUTION = (8.0, 8.0, 40.0)


def write_demo_volumes(
    size_xyz: tuple[int, int, int],
    image_path: str | None,
    labels_path: str | None,
    seed: int = 0,
    cell: float = 40.0,
) -> None:
    """Write C-order (z, y, x) .npy files of one field: wobbly cells with dark membranes and
    noise (EM-like uint8) and their uint64 labels (0 on membranes). Slab by slab, so the
    volumes may be larger than memory."""
    x_n, y_n, z_n = size_xyz
    rng = np.random.default_rng(seed)
    image = labels = None
    if image_path:
        image = np.lib.format.open_memmap(image_path, "w+", np.uint8, (z_n, y_n, x_n))
    if labels_path:
        labels = np.lib.format.open_memmap(labels_path, "w+", np.uint64, (z_n, y_n, x_n))
    yy, xx = np.meshgrid(
        np.arange(y_n, dtype=np.float32), np.arange(x_n, dtype=np.float32), indexing="ij"
    )
    anisotropy = RESOLUTION[2] / RESOLUTION[0]
    for z in range(z_n):
        warped = (
            xx + 7 * np.sin(yy / 17 + z / 13),
            yy + 7 * np.cos(xx / 19 + z / 11),
            z * anisotropy + 5 * np.sin((xx + yy) / 23),
        )
        cells = [np.floor(w / cell) for w in warped]
        edge = np.min(
            [
                np.minimum(w / cell - c, c + 1 - w / cell) * cell
                for w, c in zip(warped, cells, strict=True)
            ],
            axis=0,
        )
        if labels is not None:
            cx, cy, cz = (c.astype(np.int64) for c in cells)
            ids = ((cx * 73856093) ^ (cy * 19349663) ^ (cz * 83492791)) & (2**40 - 1)
            labels[z] = np.where(edge < 1.0, 0, ids + 1).astype(np.uint64)
        if image is not None:
            membrane = np.exp(-(edge**2) / 4.0)
            texture = 150 + 25 * np.sin(xx / 9.0 + z / 5.0) * np.cos(yy / 11.0)
            noisy = texture - 110 * membrane + rng.normal(0, 10, membrane.shape)
            image[z] = np.clip(noisy, 0, 255).astype(np.uint8)
    for array in (image, labels):
        if array is not None:
            array.flush()


def _screenshots(datasets: list[str]) -> None:
    """A picture of each dataset beside it (`<dataset>.png`), where a headless Chromium and
    the `view` extra are at hand; otherwise a line saying why not."""
    from shardwright.viewing.viewer import ViewError, write_screenshots

    shots = [(dataset, f"{dataset}.png") for dataset in datasets]
    try:
        write_screenshots(shots)
    except ViewError as exc:
        print(f"screenshots: none ({exc})", file=sys.stderr)
        return
    print("screenshots: " + " ".join(path for _, path in shots))


MARKER = ".shardwright-demo.json"  # what says a folder is the demo's own


def claim_folder(out: str, size_xyz: tuple[int, int, int]) -> bool:
    """Make `out` the demo's folder, or refuse it: the demo writes only in a new or empty
    folder, or in one it wrote before (its marker inside), so it never replaces a file it did
    not write. True when the demo volumes must be made (anew, or at another size)."""
    marker = os.path.join(out, MARKER)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise DestinationError(f"demo --out {out} is a file; name a folder for the demo")
    if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(marker):
        raise DestinationError(
            f"demo --out {out} holds files the demo did not write; name a new or empty folder"
        )
    try:
        with open(marker, encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = None
    os.makedirs(out, exist_ok=True)
    wanted = {"size_xyz": list(size_xyz)}
    if recorded != wanted:
        with open(marker, "w", encoding="utf-8") as f:
            json.dump(wanted, f)
        return True
    return False


def run_demo(
    out: str,
    size_xyz: tuple[int, int, int],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    program: str = "shardwright",
) -> int:
    """Make the demo volumes in `out`, convert each both ways, verify, and print where they
    are and the `view` command to see them (started by `program`: how the user ran us)."""
    fresh = claim_folder(out, size_xyz)
    image_path = os.path.join(out, "source", "image.npy")
    labels_path = os.path.join(out, "source", "labels.npy")
    if fresh or not (os.path.exists(image_path) and os.path.exists(labels_path)):
        print(
            f"making a {size_xyz[0]}x{size_xyz[1]}x{size_xyz[2]} demo volume ...", file=sys.stderr
        )
        os.makedirs(os.path.dirname(image_path), exist_ok=True)
        write_demo_volumes(size_xyz, image_path, labels_path)
    jobs: list[tuple[str, str, dict[str, Any]]] = [
        ("image", image_path, dict(format="precomputed", layer_type="image")),
        (
            "segmentation",
            labels_path,
            dict(
                format="precomputed", layer_type="segmentation", encoding="compressed_segmentation"
            ),
        ),
        ("image.zarr", image_path, dict(format="zarr3")),
        (
            "segmentation.zarr",
            labels_path,
            dict(format="zarr3", layer_type="segmentation", compression="zstd"),
        ),
    ]
    # Small shards so that the demo shows several of them.
    common: dict[str, Any] = dict(
        resolution=RESOLUTION, target_shard_bytes=8 * 1024**2, memory_budget=256 * 1024**2
    )
    failures = 0
    for name, source, options in jobs:
        dest = os.path.join(out, name)
        plan = api.plan(source, dest, **common, **options)
        print(f"\n== {name}\n{plan.report()}", file=sys.stderr)
        started = time.perf_counter()
        manifest = api.convert(plan, overwrite=True, scheduler=scheduler, workers=workers)
        assert isinstance(manifest, api.Manifest)
        totals = manifest.totals
        print(
            f"{name}: {totals.shards} shards, {totals.bytes:,} bytes in "
            f"{time.perf_counter() - started:.1f} s"
        )
        report = api.verify(dest, source, full=True)
        print(report.summary())
        failures += not report.ok
    root = os.path.abspath(out)
    _screenshots([os.path.join(out, name) for name, _, _ in jobs])
    print(f"\noutput: {root}")
    views = " ".join(shlex.quote(os.path.join(out, name)) for name, _, _ in jobs)
    print(f"view:   {program} view {views}")
    needs = "" if importlib.util.find_spec("neuroglancer") else f"; needs {install_command('view')}"
    print(f"        (Neuroglancer in your browser, offline{needs})")
    return 1 if failures else 0
