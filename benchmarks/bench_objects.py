"""Sharded meshes and skeletons: segments per second, objects read vs objects written.

An unsharded segmentation's `mesh` (multi-resolution Draco, two levels of detail, 1-3 + 1
fragments per segment) and `skeletons` (radius + one uint8 attribute) directories of N
segments are converted to their sharded form, each in a fresh Python process through the CLI
(start-up, imports and the local Dask cluster included), and again from the benchmark's own
process (imports paid, the local cluster started per job), to local disk. The same skeletons are
also sharded with CloudVolume's shard synthesis (`ShardingSpecification.synthesize_shard_files`,
what Igneous' skeleton merge builds on) with the same sharding spec: read every file into a
dict, synthesize, write each shard. Every output is checked: all keys read back through
TensorStore's `neuroglancer_uint64_sharded` kvstore, equal to the unsharded objects.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))  # the tests' helpers: tests.support
from _common import compile_package, write_result  # noqa: E402

from shardwright.common.control_keys import MANIFEST_KEY  # noqa: E402
from tests.support.segment_objects import (  # noqa: E402
    segment_ids,
    write_multilod_meshes,
    write_segmentation,
    write_skeletons,
)


def _convert(source: pathlib.Path, dest: pathlib.Path) -> float:
    if dest.exists():
        shutil.rmtree(dest)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", str(source), str(dest), "--quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def _convert_in_process(source: pathlib.Path, dest: pathlib.Path) -> float:
    """The same conversion from this process (imports paid), on the default local cluster."""
    from shardwright import api

    if dest.exists():
        shutil.rmtree(dest)
    started = time.perf_counter()
    api.convert(str(source), str(dest), progress=False)
    return time.perf_counter() - started


def _check(source: pathlib.Path, dest: pathlib.Path, ids: np.ndarray, kind: str) -> None:
    info = json.loads((dest / "info").read_text())
    kv = ts.KvStore.open(
        {
            "driver": "neuroglancer_uint64_sharded",
            "base": f"file://{dest}/",
            "metadata": info["sharding"],
        }
    ).result()
    keys = kv.list().result()
    assert len(keys) == ids.size, (len(keys), ids.size)
    for segment in ids.tolist()[:: max(1, ids.size // 500)]:
        name = f"{segment}.index" if kind == "mesh" else str(segment)
        got = kv.read(struct.pack(">Q", segment)).result().value
        assert got == (source / name).read_bytes(), segment


def _cloudvolume_skeletons(source: pathlib.Path, dest: pathlib.Path, sharding: dict) -> float:
    """Read every skeleton, synthesize the shards with CloudVolume, write them."""
    from cloudvolume.datasource.precomputed.sharding import ShardingSpecification

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    started = time.perf_counter()
    spec = ShardingSpecification.from_dict(sharding)
    labels = {
        int(p.name): p.read_bytes() for p in source.iterdir() if p.name.isdigit()
    }  # fmt: skip
    for name, data in spec.synthesize_shards(labels, progress=False).items():
        (dest / name).write_bytes(data)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    compile_package()
    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="swbo"))
    root = work / "seg"
    ids = segment_ids(args.segments)
    if not (root / "skeletons").exists():
        write_segmentation(root, "mesh", "skeletons")
        write_multilod_meshes(root / "mesh", ids)
        write_skeletons(root / "skeletons", ids)
    figures: dict[str, Any] = {}
    for kind in ("mesh", "skeletons"):
        source = root / kind
        dest = work / "out" / kind
        seconds = min(_convert(source, dest) for _ in range(args.repeat))
        _check(source, dest, ids, kind)
        in_process = min(_convert_in_process(source, dest) for _ in range(args.repeat))
        _check(source, dest, ids, kind)
        manifest = json.loads((dest / MANIFEST_KEY).read_text())
        requests = manifest["totals"]["requests"]
        source_objects = sum(1 for p in source.iterdir() if p.name != "info")
        written = sum(1 for p in dest.iterdir())  # shards + info + manifest
        figures[kind] = {
            "segments": int(ids.size),
            "source_objects": source_objects,
            "source_bytes": sum(p.stat().st_size for p in source.iterdir()),
            "objects_read": requests.get("gets", 0),
            "objects_written": written,
            "shards": manifest["totals"]["shards"],
            "sharding": json.loads((dest / "info").read_text())["sharding"],
            "seconds_whole_process": round(seconds, 3),
            "segments_per_second": round(ids.size / seconds),
            "seconds_in_process": round(in_process, 3),
            "segments_per_second_in_process": round(ids.size / in_process),
        }
        print(kind, figures[kind]["segments_per_second"], "segments/s", file=sys.stderr)
    peer_dest = work / "out" / "skeletons-cloudvolume"
    peer = min(
        _cloudvolume_skeletons(root / "skeletons", peer_dest, figures["skeletons"]["sharding"])
        for _ in range(args.repeat)
    )
    shutil.copy(work / "out" / "skeletons" / "info", peer_dest / "info")
    _check(root / "skeletons", peer_dest, ids, "skeletons")
    figures["skeletons_cloudvolume_synthesize_in_process"] = {
        "seconds": round(peer, 3),
        "segments_per_second": round(ids.size / peer),
        "note": "in-process (no interpreter start-up), all skeletons held in memory at once",
    }
    figures["ratio_skeletons_cloudvolume_over_shardwright_in_process"] = round(
        peer / figures["skeletons"]["seconds_in_process"], 2
    )
    figures["setup"] = {"repeat": args.repeat, "cpus": os.cpu_count(), "disk": "local"}
    path = write_result(
        "objects", figures, ("shardwright", "cloud-volume", "tensorstore", "DracoPy")
    )
    print(path)
    if args.workdir is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
