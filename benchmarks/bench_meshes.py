"""Meshes and skeletons made from a segmentation: shardwright vs Igneous, time, memory, quality.

A deterministic neuron-like uint64 segmentation (default 512 x 512 x 256 voxels at 8 x 8 x 40 nm,
~1,000 segments: persistent random-walk tubes of 50-300 nm radius, a few somata, split where
they touch as a Voronoi partition of their centre lines, background between; with `--cells
bodies`, cell bodies instead: ellipsoids of 180-480 nm radius split where they touch; both
`tests/support/cells.py`'s) is written as an unsharded precomputed volume (64^3 chunks,
compressed_segmentation + gzip) with CloudVolume.
Then, each as a fresh process tree timed end to end, with the peak of the summed RSS and PSS of
all its processes sampled every 0.1 s:

- **Igneous**: in a copy of that layer, `create_meshing_tasks(sharded=True)` and
  `create_skeletonizing_tasks(sharded=True)` into a FileQueue (`fq://`), run by
  `igneous -p CORES execute -x`; then `create_sharded_multires_mesh_tasks` and
  `create_sharded_skeleton_merge_tasks`, run the same way. The parameters are those of
  Igneous's own command line (`igneous mesh forge --sharded`, `mesh merge-sharded`,
  `skeleton forge --sharded`, `skeleton merge-sharded`) unless an option here changes them;
  all are recorded. Its default skeleton task (512^3) holds this whole volume, so it meets no
  task border; `igneous_skeletons_at_block` forges and merges the skeletons again with tasks
  of shardwright's mesh block (`--mesh-block`, default 128^3), the same cuts as ours.
- **shardwright**: `python -m shardwright.cli convert SRC DEST --generate-meshes
  --generate-skeletons` (DEST/mesh: sharded `neuroglancer_multilod_draco`, DEST/skeletons:
  sharded `neuroglancer_skeletons`). A failure is recorded with its output, not raised.
- **meshes alone** (`igneous_meshes`, `shardwright_meshes`; `--skip-meshes-alone` leaves them
  out): each tool making only the meshes, so that their times compare meshes with meshes;
  **skeletons alone** likewise (`igneous_skeletons`: Igneous's default task, the whole volume
  in one, `shardwright_skeletons`; `--skip-skeletons-alone`).

Quality, read back with CloudVolume from each output: per segment, the surface area of the level
of detail 0 mesh over that of zmesh's unsimplified, closed mesh of the whole volume
(`Mesher.get(id, reduction_factor=0, max_error=0, voxel_centered=True)`), and the skeleton's
cable length over that of kimimaro run on the whole volume with Igneous's TEASAR parameters;
min / median / max over the segments both have, how many are more than 15 % off, total
vertices, segments with output (and with an empty skeleton). The reference is computed once
per work folder and cached there (`reference.json`).

Igneous lives in an environment of its own (it pins DracoPy < 2; the project's has 2.x):

    python3 -m venv /work/igneous-venv
    /work/igneous-venv/bin/pip install igneous-pipeline cloud-volume zmesh kimimaro DracoPy psutil

and runs there through `--igneous-python` (this file is started there as `bench_meshes.py
igneous-worker ...`); shardwright runs with `--shardwright-python` (default: this interpreter).
The orchestrating interpreter needs numpy, scipy, psutil, cloud-volume, zmesh and kimimaro
(the project's test environment has them):

    .venv/bin/python benchmarks/bench_meshes.py --igneous-python /work/igneous-venv/bin/python
    .venv/bin/python benchmarks/bench_meshes.py --igneous-python ... --work /tmp/bm \
        --only igneous_skeletons_at_block,shardwright   # some runs again, the same SRC
    .venv/bin/python benchmarks/bench_meshes.py --shape 128,128,64 --work /tmp/bm   # quick try
    .venv/bin/python benchmarks/bench_meshes.py --skip-igneous --work /tmp/bm       # reuse SRC

The JSON goes to `results/meshes-DATE.json` (`--out` elsewhere). The process trees' RSS sums
count shared pages once per process; PSS shares them out.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import RESULTS, machine, versions  # noqa: E402

sys.path.insert(0, str(HERE.parents[1]))  # the tests' helpers: tests.support
from tests.support.cells import cell_bodies, neurites  # noqa: E402

GENERATORS = {  # --cells: the segmentation, and how the source's stamp names it
    "neurites": (neurites, "random-walk tubes + somata, Voronoi split of centre lines (v1)"),
    "bodies": (cell_bodies, "ellipsoidal cell bodies, Voronoi split where they touch (v1)"),
}

PACKAGES = (
    "igneous-pipeline",
    "cloud-volume",
    "zmesh",
    "meshoptimizer",
    "kimimaro",
    "DracoPy",
    "task-queue",
    "numpy",
    "scipy",
    "psutil",
    "shardwright",
)
FULL_SHAPE = (512, 512, 256)
FULL_SEGMENTS = 1000
OUR_BLOCK = (128, 128, 128)  # shardwright's default --mesh-block (planning/generated.py)
OFF = 0.15  # a skeleton whose cable is more than this fraction from the reference's is off
MESHES, SKELETONS = "meshes", "skeletons"
RUNS = ("igneous", "igneous_skeletons_at_block", "igneous_meshes", "igneous_skeletons",
        "shardwright", "shardwright_meshes", "shardwright_skeletons")  # fmt: skip


# --------------------------------------------------------------------------- the segmentation


def _xyz(text: str, kind: type = int) -> tuple:
    parts = tuple(kind(p) for p in text.split(","))
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected X,Y,Z, got {text!r}")
    return parts


def write_segmentation(
    labels: np.ndarray,
    folder: pathlib.Path,
    resolution: tuple[float, float, float],
    chunk: tuple[int, int, int],
    encoding: str,
) -> None:
    from cloudvolume import CloudVolume

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    CloudVolume.from_numpy(
        labels,
        vol_path=f"file://{folder}",
        resolution=resolution,
        voxel_offset=(0, 0, 0),
        chunk_size=chunk,
        layer_type="segmentation",
        encoding=encoding,
        compress="gzip",
        progress=False,
    )


def read_segmentation(folder: pathlib.Path) -> np.ndarray:
    from cloudvolume import CloudVolume

    volume = CloudVolume(f"file://{folder}", mip=0, progress=False)
    return np.asfortranarray(volume[:, :, :][..., 0])


def source_volume(args: argparse.Namespace, work: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """Write the segmentation under `work/src` (or reuse the one the same parameters wrote)."""
    folder = work / "src"
    stamp_path = work / "src.json"
    wanted = {
        "shape": list(args.shape),
        "resolution": list(args.resolution),
        "segments_requested": args.segments,
        "seed": args.seed,
        "chunk_size": list(args.chunk),
        "encoding": args.encoding,
        "compress": "gzip",
        "generator": GENERATORS[args.cells][1],
    }
    if stamp_path.exists() and (folder / "info").exists():
        stamp = json.loads(stamp_path.read_text())
        if {k: stamp.get(k) for k in wanted} == wanted:
            print(f"reusing {folder}", file=sys.stderr)
            return folder, stamp
    started = time.perf_counter()
    labels = GENERATORS[args.cells][0](args.shape, args.resolution, args.segments, args.seed)
    made = time.perf_counter() - started
    write_segmentation(labels, folder, args.resolution, args.chunk, args.encoding)
    present = np.unique(labels)
    stamp = dict(wanted)
    stamp.update(
        segments_present=int(np.count_nonzero(present)),
        background_fraction=round(float(np.count_nonzero(labels == 0) / labels.size), 4),
        labels_sha256=hashlib.sha256(np.ascontiguousarray(labels).tobytes()).hexdigest(),
        source_bytes=tree_bytes(folder),
        seconds_to_make=round(made, 1),
    )
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
    print(
        f"wrote {folder}: {stamp['segments_present']} segments, "
        f"{stamp['background_fraction']:.0%} background, made in {made:.0f} s",
        file=sys.stderr,
    )
    return folder, stamp


# --------------------------------------------------------------------------- measuring


def tree_bytes(path: pathlib.Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# Put before every command run_measured runs (bench_in_place.py's strace pass counting the
# bytes read of a sharded scale; empty otherwise).
COMMAND_PREFIX: list[str] = []


def run_measured(
    command: list[str], log: pathlib.Path, timeout: float, interval: float = 0.1
) -> dict[str, Any]:
    """Run `command` as its own process group; wall time and peak summed RSS / PSS of its tree."""
    import psutil

    command = [*COMMAND_PREFIX, *command]

    log.parent.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} before the run", file=sys.stderr)
    peak_rss = peak_pss = peak_one = 0
    peak_processes = 0
    with open(log, "wb") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        root = psutil.Process(process.pid)
        timed_out = False
        while process.poll() is None:
            rss = pss = 0
            try:
                members = [root, *root.children(recursive=True)]
            except psutil.Error:
                members = []
            for member in members:
                try:
                    info = member.memory_full_info()
                except psutil.Error:
                    continue
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
                peak_one = max(peak_one, info.rss)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            peak_processes = max(peak_processes, len(members))
            if time.perf_counter() - started > timeout:
                timed_out = True
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                break
            time.sleep(interval)
        wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    text = log.read_text(errors="replace")
    return {
        "command": shlex.join(command),
        "returncode": process.returncode,
        "timed_out": timed_out,
        "wall_seconds": round(wall, 2),
        # user + system time of the whole tree (every process in it was waited for): less
        # sensitive than the wall time to other work on the machine
        "cpu_seconds": round(cpu, 1),
        "peak_rss_sum_bytes": peak_rss,
        "peak_pss_sum_bytes": peak_pss,
        "peak_rss_one_process_bytes": peak_one,
        "peak_processes": peak_processes,
        # what the tree's processes read from and wrote to the block devices (read_bytes and
        # write_bytes of /proc/PID/io, summed over the waited-for tree by getrusage): page-cache
        # hits are not in it
        "block_read_bytes": 512 * (usage.ru_inblock - usage_before.ru_inblock),
        "block_written_bytes": 512 * (usage.ru_oublock - usage_before.ru_oublock),
        # another job on the machine skews the times: the 1-minute load just before, and the
        # 1/5/15-minute loads at the end (this run's own processes count in them)
        "loadavg_before": round(load_before[0], 2),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "log": str(log),
        "log_tail": text[-3000:] if process.returncode else "",
    }


# --------------------------------------------------------------------------- Igneous


def our_block(args: argparse.Namespace) -> tuple[int, int, int]:
    """shardwright's mesh block in this run: its `--mesh-block`, else its default."""
    words = shlex.split(args.shardwright_args)
    if "--mesh-block" in words:
        return _xyz(words[words.index("--mesh-block") + 1])
    return OUR_BLOCK


def igneous_parameters(
    args: argparse.Namespace,
    outputs: tuple[str, ...] = (MESHES, SKELETONS),
    skeleton_shape: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """What the Igneous half asks for: its command line's defaults, bar the options here;
    `outputs` what it makes, `skeleton_shape` its skeleton task (default `--skeleton-shape`)."""
    return {
        "outputs": list(outputs),
        "mesh_forge": {
            "mip": 0,
            "shape": list(args.mesh_shape),
            "simplification": True,
            "max_simplification_error": args.mesh_max_error,
            "dust_threshold": None,
            "sharded": True,
            "spatial_index": True,
            "closed_dataset_edges": True,
            "fill_holes": 0,
            "compress": "gzip",
        },
        "mesh_merge": {
            "num_lod": args.mesh_nlod,
            "vertex_quantization_bits": 16,
            "draco_compression_level": 7,
            "shard_index_bytes": 2**13,
            "minishard_index_bytes": 2**15,
            "min_shards": 1,
            "max_labels_per_shard": 1000,
            "minishard_index_encoding": "gzip",
            "min_chunk_size": [256, 256, 256],
        },
        "skeleton_forge": {
            "mip": 0,
            "shape": list(skeleton_shape or args.skeleton_shape),
            "teasar_params": teasar_parameters(args),
            "dust_threshold": args.skeleton_dust,
            "fix_branching": True,
            "fix_borders": True,
            "fix_avocados": False,
            "fill_holes": 0,
            "sharded": True,
            "spatial_index": True,
            "parallel": 1,
        },
        "skeleton_merge": {
            "dust_threshold": args.min_cable_length,
            "tick_threshold": 0,
            "max_cable_length": None,
            "shard_index_bytes": 2**13,
            "minishard_index_bytes": 2**15,
            "min_shards": 1,
            "max_labels_per_shard": 2000,
            "minishard_index_encoding": "gzip",
            "data_encoding": "gzip",
        },
        "execute": {"parallel": args.cores, "lease_seconds": 7200, "exit_on_empty": True},
    }


def teasar_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """`igneous skeleton forge`'s TEASAR defaults (physical units: nm at this resolution)."""
    return {
        "scale": args.teasar_scale,
        "const": args.teasar_const,
        "pdrf_exponent": 4,
        "pdrf_scale": 100000,
        "soma_detection_threshold": 1100,
        "soma_acceptance_threshold": 3500,
        "soma_invalidation_scale": 1.0,
        "soma_invalidation_const": 300,
        "max_paths": None,
    }


def _igneous_command() -> list[str]:
    script = pathlib.Path(sys.executable).parent / "igneous"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from igneous_cli.cli import main; sys.exit(main())"]


def _igneous_execute(queue: pathlib.Path, execute: dict[str, Any]) -> float:
    from taskqueue import TaskQueue

    started = time.perf_counter()
    subprocess.run(
        [
            *_igneous_command(),
            "-p",
            str(execute["parallel"]),
            "execute",
            "-x",
            "-q",
            "--lease-sec",
            str(execute["lease_seconds"]),
            f"fq://{queue}",
        ],
        check=True,
    )
    seconds = time.perf_counter() - started
    left = TaskQueue(f"fq://{queue}").enqueued
    if left:
        raise RuntimeError(f"{left} Igneous tasks left in fq://{queue} (one failed?)")
    return seconds


def igneous_worker(argv: list[str]) -> None:
    """Runs in Igneous's environment: forge then merge the meshes and / or skeletons of one
    layer (the parameters' `outputs`)."""
    parser = argparse.ArgumentParser(prog="bench_meshes.py igneous-worker")
    parser.add_argument("--layer", required=True, help="the precomputed folder (written into)")
    parser.add_argument("--queue", required=True, help="a folder for the FileQueue")
    parser.add_argument("--params", required=True, help="igneous_parameters() as JSON")
    parser.add_argument("--report", required=True, help="JSON written here at the end")
    args = parser.parse_args(argv)

    import igneous.task_creation as tc
    from taskqueue import TaskQueue

    params = json.loads(args.params)
    layer = f"file://{pathlib.Path(args.layer).resolve()}"
    report: dict[str, Any] = {"versions": versions(*PACKAGES), "phases": {}, "tasks": {}}
    phases, tasks = report["phases"], report["tasks"]

    outputs = params.get("outputs", [MESHES, SKELETONS])

    def enqueue(name: str, iterator: Any) -> None:
        batch = list(iterator)
        tasks[name] = len(batch)
        queue = TaskQueue(f"fq://{pathlib.Path(args.queue).resolve()}")
        queue.insert(batch)

    started = time.perf_counter()
    forge_mesh, forge_skel = params["mesh_forge"], params["skeleton_forge"]
    if MESHES in outputs:
        enqueue("mesh_forge", tc.create_meshing_tasks(
            layer,
            forge_mesh["mip"],
            shape=tuple(forge_mesh["shape"]),
            simplification=forge_mesh["simplification"],
            max_simplification_error=forge_mesh["max_simplification_error"],
            dust_threshold=forge_mesh["dust_threshold"],
            sharded=forge_mesh["sharded"],
            spatial_index=forge_mesh["spatial_index"],
            closed_dataset_edges=forge_mesh["closed_dataset_edges"],
            fill_holes=forge_mesh["fill_holes"],
            compress=forge_mesh["compress"],
        ))  # fmt: skip
    if SKELETONS in outputs:
        enqueue("skeleton_forge", tc.create_skeletonizing_tasks(
            layer,
            forge_skel["mip"],
            shape=tuple(forge_skel["shape"]),
            teasar_params=forge_skel["teasar_params"],
            dust_threshold=forge_skel["dust_threshold"],
            fix_branching=forge_skel["fix_branching"],
            fix_borders=forge_skel["fix_borders"],
            fix_avocados=forge_skel["fix_avocados"],
            fill_holes=forge_skel["fill_holes"],
            sharded=forge_skel["sharded"],
            spatial_index=forge_skel["spatial_index"],
            parallel=forge_skel["parallel"],
        ))  # fmt: skip
    phases["forge_enqueue"] = time.perf_counter() - started
    phases["forge_execute"] = _igneous_execute(pathlib.Path(args.queue), params["execute"])

    merge_started = time.perf_counter()
    merge_mesh, merge_skel = params["mesh_merge"], params["skeleton_merge"]
    if MESHES in outputs:
        enqueue("mesh_merge", tc.create_sharded_multires_mesh_tasks(
            layer,
            num_lod=merge_mesh["num_lod"],
            vertex_quantization_bits=merge_mesh["vertex_quantization_bits"],
            draco_compression_level=merge_mesh["draco_compression_level"],
            shard_index_bytes=merge_mesh["shard_index_bytes"],
            minishard_index_bytes=merge_mesh["minishard_index_bytes"],
            min_shards=merge_mesh["min_shards"],
            max_labels_per_shard=merge_mesh["max_labels_per_shard"],
            minishard_index_encoding=merge_mesh["minishard_index_encoding"],
            min_chunk_size=tuple(merge_mesh["min_chunk_size"]),
            progress=False,
        ))  # fmt: skip
    if SKELETONS in outputs:
        enqueue("skeleton_merge", tc.create_sharded_skeleton_merge_tasks(
            layer,
            dust_threshold=merge_skel["dust_threshold"],
            tick_threshold=merge_skel["tick_threshold"],
            max_cable_length=merge_skel["max_cable_length"],
            shard_index_bytes=merge_skel["shard_index_bytes"],
            minishard_index_bytes=merge_skel["minishard_index_bytes"],
            min_shards=merge_skel["min_shards"],
            max_labels_per_shard=merge_skel["max_labels_per_shard"],
            minishard_index_encoding=merge_skel["minishard_index_encoding"],
            data_encoding=merge_skel["data_encoding"],
        ))  # fmt: skip
    phases["merge_enqueue"] = time.perf_counter() - merge_started
    phases["merge_execute"] = _igneous_execute(pathlib.Path(args.queue), params["execute"])
    phases["total_in_worker"] = time.perf_counter() - started
    report["phases"] = {k: round(v, 2) for k, v in phases.items()}
    report["api"] = [
        "igneous.task_creation.create_meshing_tasks",
        "igneous.task_creation.create_skeletonizing_tasks",
        "igneous.task_creation.create_sharded_multires_mesh_tasks",
        "igneous.task_creation.create_sharded_skeleton_merge_tasks",
        "taskqueue.TaskQueue('fq://...').insert",
        "igneous -p N execute -x",
    ]
    pathlib.Path(args.report).write_text(json.dumps(report, indent=2) + "\n")


def run_igneous(
    args: argparse.Namespace,
    source: pathlib.Path,
    work: pathlib.Path,
    name: str = "igneous",
    params: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """One Igneous run in `work/name` (default: meshes and skeletons at its own shapes)."""
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    layer = folder / "layer"
    shutil.copytree(source, layer)  # Igneous writes its mesh and skeleton dirs into the layer
    return igneous_in_layer(args, layer, folder, params or igneous_parameters(args))


def igneous_in_layer(
    args: argparse.Namespace,
    layer: pathlib.Path,
    folder: pathlib.Path,
    params: dict[str, Any],
    script: pathlib.Path = HERE,
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """Igneous's forge and merge run into `layer` itself, its queue, log and report in `folder`
    (by `script igneous-worker`: this file's, or one that does more, bench_in_place.py's)."""
    queue, report = folder / "queue", folder / "report.json"
    queue.mkdir(parents=True)
    command = [
        args.igneous_python,
        str(script),
        "igneous-worker",
        "--layer",
        str(layer),
        "--queue",
        str(queue),
        "--params",
        json.dumps(params),
        "--report",
        str(report),
    ]
    print("igneous:", shlex.join(command[:3]), "...", file=sys.stderr)
    result: dict[str, Any] = {"parameters": params, "python": args.igneous_python}
    result.update(run_measured(command, folder / "log.txt", args.timeout))
    if report.exists():
        result.update(json.loads(report.read_text()))
    if result["returncode"] != 0:
        result["error"] = f"exit {result['returncode']}: " + result["log_tail"][-1500:]
        return result, None
    result.update(output_sizes(layer))
    return result, layer


# --------------------------------------------------------------------------- shardwright


def run_shardwright(
    args: argparse.Namespace,
    source: pathlib.Path,
    work: pathlib.Path,
    name: str = "shardwright",
    outputs: tuple[str, ...] = (MESHES, SKELETONS),
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """One shardwright run in `work/name`, making `outputs`."""
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    dest = folder / "dest"
    return shardwright_convert(args, [source, dest], folder, outputs)


def shardwright_convert(
    args: argparse.Namespace,
    paths: list[pathlib.Path],
    folder: pathlib.Path,
    outputs: tuple[str, ...] = (MESHES, SKELETONS),
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """`convert *paths` making `outputs` (into the last path: DEST, or the dataset itself when
    it is the only one), its log in `folder`."""
    python = args.shardwright_python
    # compile the package first, as a wheel install would (see _common.compile_package)
    subprocess.run(
        [
            python,
            "-c",
            "import compileall, os, shardwright; "
            "compileall.compile_dir(os.path.dirname(shardwright.__file__), quiet=1)",
        ],
        check=False,
        capture_output=True,
    )
    command = [
        python,
        "-m",
        args.shardwright_module,
        "convert",
        *(str(p) for p in paths),
        *(["--generate-meshes"] if MESHES in outputs else []),
        *(["--generate-skeletons"] if SKELETONS in outputs else []),
        *shlex.split(args.shardwright_args),
    ]
    print("shardwright:", shlex.join(command), file=sys.stderr)
    result: dict[str, Any] = {"python": python}
    result.update(run_measured(command, folder / "log.txt", args.timeout))
    if result["returncode"] != 0:
        result["error"] = f"exit {result['returncode']}: " + result["log_tail"][-1500:]
        return result, None
    result.update(output_sizes(paths[-1]))
    return result, paths[-1]


# --------------------------------------------------------------------------- outputs, quality


def output_sizes(layer: pathlib.Path) -> dict[str, Any]:
    """Bytes of the mesh and skeleton dirs the layer's info names: final (shards + info) and
    everything there (an Igneous run leaves its fragments and spatial index beside them)."""
    info = json.loads((layer / "info").read_text())
    out: dict[str, Any] = {}
    for kind in ("mesh", "skeletons"):
        name = info.get(kind)
        if not name:
            out[f"{kind}_dir"] = None
            continue
        folder = layer / name
        kind_info = folder / "info"
        final = [p for p in folder.rglob("*") if p.suffix == ".shard" or p.name == "info"]
        out[f"{kind}_dir"] = name
        out[f"{kind}_type"] = (
            json.loads(kind_info.read_text()).get("@type") if kind_info.exists() else None
        )
        out[f"{kind}_shard_files"] = sum(1 for p in final if p.suffix == ".shard")
        out[f"{kind}_output_bytes"] = sum(p.stat().st_size for p in final)
        out[f"{kind}_dir_bytes"] = tree_bytes(folder)
    out["output_bytes"] = sum(out.get(f"{k}_output_bytes", 0) for k in ("mesh", "skeletons"))
    out["dir_bytes"] = sum(out.get(f"{k}_dir_bytes", 0) for k in ("mesh", "skeletons"))
    return out


def surface_area(vertices: np.ndarray, faces: np.ndarray) -> float:
    if len(faces) == 0:
        return 0.0
    v = np.asarray(vertices, dtype=np.float64)
    f = np.asarray(faces, dtype=np.int64)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    return float(np.linalg.norm(np.cross(b - a, c - a), axis=1).sum() / 2)


def reference(args: argparse.Namespace, source: pathlib.Path, work: pathlib.Path) -> dict[str, Any]:
    """zmesh's unsimplified closed meshes and kimimaro's skeletons of the whole volume."""
    path = work / "reference.json"
    teasar = teasar_parameters(args)
    key = {
        "source": json.loads((work / "src.json").read_text())["labels_sha256"],
        "teasar_params": teasar,
        "dust_threshold": args.skeleton_dust,
    }
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached
    import kimimaro
    import zmesh

    labels = read_segmentation(source)
    started = time.perf_counter()
    mesher = zmesh.Mesher(args.resolution)
    mesher.mesh(labels, close=True)
    meshes = {}
    for segment in mesher.ids():
        mesh = mesher.get(
            segment, normals=False, reduction_factor=0, max_error=0, voxel_centered=True
        )
        meshes[str(int(segment))] = [surface_area(mesh.vertices, mesh.faces), len(mesh.vertices)]
        mesher.erase(segment)
    del mesher
    mesh_seconds = time.perf_counter() - started
    started = time.perf_counter()
    skeletons = kimimaro.skeletonize(
        labels,
        teasar_params=teasar,
        anisotropy=args.resolution,
        dust_threshold=args.skeleton_dust,
        fix_branching=True,
        fix_borders=True,
        fix_avocados=False,
        progress=False,
        parallel=args.cores,
    )
    cables = {str(int(k)): float(s.cable_length()) for k, s in skeletons.items()}
    record = {
        "key": key,
        "mesh": meshes,
        "cable": cables,
        "zmesh_seconds": round(mesh_seconds, 1),
        "kimimaro_seconds": round(time.perf_counter() - started, 1),
        "kimimaro_parallel": args.cores,
    }
    path.write_text(json.dumps(record) + "\n")
    return record


def _spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None}
    array = np.asarray(values)
    return {
        "n": int(array.size),
        "min": round(float(array.min()), 4),
        "median": round(float(np.median(array)), 4),
        "max": round(float(array.max()), 4),
    }


def quality(layer: pathlib.Path, ref: dict[str, Any], min_cable: float) -> dict[str, Any]:
    """Meshes (level of detail 0) and skeletons read back with CloudVolume, against `ref`
    (and how many reference skeletons reach Igneous's merge filter, `min_cable` nm)."""
    from cloudvolume import CloudVolume

    volume = CloudVolume(f"file://{layer}", progress=False)
    segments = sorted(int(k) for k in ref["mesh"])
    out: dict[str, Any] = {}
    try:
        if "mesh" not in volume.info:
            raise LookupError("no meshes made")
        try:
            meshes = volume.mesh.get(segments, lod=0, allow_missing=True)
        except TypeError:  # a source without allow_missing
            meshes = volume.mesh.get(segments, lod=0)
        ratios, vertices, faces = [], 0, 0
        for segment, mesh in meshes.items():
            vertices += len(mesh.vertices)
            faces += len(mesh.faces)
            want = ref["mesh"].get(str(int(segment)), [0.0, 0])[0]
            if want > 0:
                ratios.append(surface_area(mesh.vertices, mesh.faces) / want)
        out["mesh"] = {
            "segments_with_mesh": len(meshes),
            "segments_in_reference": len(ref["mesh"]),
            "lod0_vertices": vertices,
            "lod0_faces": faces,
            "reference_vertices": int(sum(v for _, v in ref["mesh"].values())),
            "area_ratio": _spread(ratios),
        }
    except Exception as error:  # a reader failure is a finding, not a crash
        out["mesh"] = {"error": f"{type(error).__name__}: {error}"[:1000]}
    try:
        if "skeletons" not in volume.info:
            raise LookupError("no skeletons made")
        ratios, found, vertices, cable, empty = [], set(), 0, 0.0, 0
        for segment in segments:
            try:
                skeleton = volume.skeleton.get(segment)
            except Exception:
                continue
            if skeleton is None or len(skeleton.edges) == 0:
                empty += skeleton is not None
                continue
            found.add(segment)
            vertices += len(skeleton.vertices)
            length = float(skeleton.cable_length())
            cable += length
            want = ref["cable"].get(str(segment), 0.0)
            if want > 0:
                ratios.append(length / want)
        out["skeleton"] = {
            "segments_with_skeleton": len(found),
            "segments_in_reference": len(ref["cable"]),
            "vertices": vertices,
            "cable_nm": round(cable, 1),
            "reference_cable_nm": round(sum(ref["cable"].values()), 1),
            "reference_at_least_min_cable": sum(1 for c in ref["cable"].values() if c >= min_cable),
            "segments_with_empty_skeleton": empty,  # stored with no edge
            "reference_without_skeleton": sum(1 for k in ref["cable"] if int(k) not in found),
            # of the segments with a skeleton and a reference (`cable_ratio`'s n)
            "off_more_than_15_percent": sum(1 for r in ratios if abs(r - 1) > OFF),
            "cable_ratio": _spread(ratios),
        }
    except Exception as error:
        out["skeleton"] = {"error": f"{type(error).__name__}: {error}"[:1000]}
    return out


def add_quality(
    args: argparse.Namespace,
    source: pathlib.Path,
    work: pathlib.Path,
    tools: dict[str, dict[str, Any]],
    outputs: dict[str, pathlib.Path],
) -> dict[str, Any]:
    """Each output's `quality` into its tool's record (unless --skip-quality); returns what the
    reference is and, where it was computed, its totals and times."""
    described: dict[str, Any] = {
        "zmesh": "Mesher(resolution).mesh(labels, close=True); get(id, normals=False, "
        "reduction_factor=0, max_error=0, voxel_centered=True)",
        "kimimaro": {
            "teasar_params": teasar_parameters(args),
            "anisotropy": list(args.resolution),
            "dust_threshold": args.skeleton_dust,
            "fix_branching": True,
            "fix_borders": True,
        },
    }
    if not outputs or args.skip_quality:
        return described
    ref = reference(args, source, work)
    described.update(
        {k: ref[k] for k in ("zmesh_seconds", "kimimaro_seconds", "kimimaro_parallel")}
    )
    described.update(
        meshes=len(ref["mesh"]),
        skeletons=len(ref["cable"]),
        vertices=int(sum(v for _, v in ref["mesh"].values())),
        cable_nm=round(sum(ref["cable"].values()), 1),
    )
    for name, folder in outputs.items():
        tools[name]["quality"] = quality(folder, ref, args.min_cable_length)
    return described


# --------------------------------------------------------------------------- report


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_table(tools: dict[str, dict[str, Any]], extra: tuple = ()) -> None:
    """The tools side by side; `extra`: more (label, function of a record) rows at the end."""
    rows = [
        ("wall s", lambda r: r.get("wall_seconds")),
        ("cpu s (tree)", lambda r: r.get("cpu_seconds")),
        ("peak RSS sum MiB", lambda r: r.get("peak_rss_sum_bytes", 0) / 2**20),
        ("peak PSS sum MiB", lambda r: r.get("peak_pss_sum_bytes", 0) / 2**20),
        ("output MiB", lambda r: r.get("output_bytes", 0) / 2**20),
        ("dirs MiB (w/ fragments)", lambda r: r.get("dir_bytes", 0) / 2**20),
        ("meshes", lambda r: r.get("quality", {}).get("mesh", {}).get("segments_with_mesh")),
        ("LOD0 vertices", lambda r: r.get("quality", {}).get("mesh", {}).get("lod0_vertices")),
        (
            "skeletons",
            lambda r: r.get("quality", {}).get("skeleton", {}).get("segments_with_skeleton"),
        ),
        (
            "empty skeletons",
            lambda r: r.get("quality", {}).get("skeleton", {}).get("segments_with_empty_skeleton"),
        ),
        (
            "skeletons >15 % off",
            lambda r: r.get("quality", {}).get("skeleton", {}).get("off_more_than_15_percent"),
        ),
    ]
    for name, field in (("area", "mesh"), ("cable", "skeleton")):
        for stat in ("min", "median", "max"):
            rows.append(
                (
                    f"{name} ratio {stat}",
                    lambda r, f=field, n=name, s=stat: (
                        r.get("quality", {}).get(f, {}).get(f"{n}_ratio", {}).get(s)
                    ),
                )
            )
    rows += extra
    names = list(tools)
    print(f"{'':26}" + "".join(f"{n[:27]:>28}" for n in names))
    for label, get in rows:
        cells = []
        for n in names:
            record = tools[n]
            cells.append("error" if "error" in record and label != "wall s" else _fmt(get(record)))
        print(f"{label:26}" + "".join(f"{c:>28}" for c in cells))
    for n in names:
        if "error" in tools[n]:
            print(f"{n}: {tools[n]['error'].splitlines()[-1] if tools[n]['error'] else ''}")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of the volume, the tools and the quality measures (bench_in_place.py too)."""
    parser.add_argument("--shape", type=_xyz, default=FULL_SHAPE, help="X,Y,Z voxels")
    parser.add_argument("--resolution", type=lambda t: _xyz(t, float), default=(8.0, 8.0, 40.0))
    parser.add_argument(
        "--segments", type=int, default=None, help="default: 1000 scaled by the shape's volume"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cells",
        choices=sorted(GENERATORS),
        default="neurites",
        help="neurites (default) or cell bodies (blobs that touch: each segment a TEASAR "
        "skeleton that one pass makes short, and block cuts make long)",
    )
    parser.add_argument("--chunk", type=_xyz, default=(64, 64, 64))
    parser.add_argument(
        "--encoding", choices=("compressed_segmentation", "raw"), default="compressed_segmentation"
    )
    parser.add_argument("--work", default=None, help="work folder (default: a new temp dir)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per tool run")
    parser.add_argument("--igneous-python", default=sys.executable)
    parser.add_argument("--shardwright-python", default=sys.executable)
    parser.add_argument(
        "--shardwright-module", default="shardwright.cli", help="run as python -m MODULE"
    )
    parser.add_argument("--shardwright-args", default="", help="more convert options")
    parser.add_argument("--skip-igneous", action="store_true")
    parser.add_argument("--skip-shardwright", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--mesh-shape", type=_xyz, default=(448, 448, 448))
    parser.add_argument("--mesh-max-error", type=float, default=40.0, help="nm (Igneous)")
    parser.add_argument("--mesh-nlod", type=int, default=1, help="Igneous merge-sharded --nlod")
    parser.add_argument("--skeleton-shape", type=_xyz, default=(512, 512, 512))
    parser.add_argument("--skeleton-dust", type=int, default=1000, help="voxels")
    parser.add_argument("--min-cable-length", type=float, default=1000.0, help="nm")
    parser.add_argument("--teasar-scale", type=float, default=4.0)
    parser.add_argument("--teasar-const", type=float, default=10.0, help="nm")


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """The defaults that depend on other options (--segments on --shape)."""
    if args.segments is None:
        fraction = np.prod(args.shape) / np.prod(FULL_SHAPE)
        args.segments = max(20, round(FULL_SEGMENTS * float(fraction)))
    return args


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(parser)
    parser.add_argument("--out", default=None, help="JSON path (default results/meshes-DATE)")
    parser.add_argument(
        "--skip-meshes-alone", action="store_true", help="no runs making the meshes alone"
    )
    parser.add_argument(
        "--skip-skeletons-alone", action="store_true",
        help="no runs making the skeletons alone",
    )  # fmt: skip
    parser.add_argument(
        "--only", default=None, help=f"comma-separated runs of {', '.join(RUNS)} (default all)"
    )
    return finish_args(parser.parse_args(argv))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["igneous-worker"]:
        igneous_worker(argv[1:])
        return
    args = parse_args(argv)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench_meshes-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    source, stamp = source_volume(args, work)

    tools: dict[str, dict[str, Any]] = {}
    outputs: dict[str, pathlib.Path] = {}
    for name, run in runs(args).items():
        tools[name], folder = run(source, work)
        if folder is not None:
            outputs[name] = folder
    ref_info = add_quality(args, source, work, tools, outputs)
    ratio = time_ratio(tools, "igneous", "shardwright")
    meshes_ratio = time_ratio(tools, "igneous_meshes", "shardwright_meshes")
    skeletons_ratio = time_ratio(tools, "igneous_skeletons", "shardwright_skeletons")
    record = {
        "benchmark": "meshes",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(*PACKAGES),
        "parameters": {
            "source": stamp,
            "cores": args.cores,
            "work": str(work),
            "reference": ref_info,
            "shardwright_args": args.shardwright_args,
            "shardwright_block": list(our_block(args)),
        },
        "tools": tools,
        "igneous_over_shardwright_time": ratio,
        "igneous_over_shardwright_meshes_time": meshes_ratio,
        "igneous_over_shardwright_skeletons_time": skeletons_ratio,
    }
    out = pathlib.Path(args.out) if args.out else RESULTS / f"meshes-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print_table(tools)
    if ratio is not None:
        print(f"igneous / shardwright time: {ratio}")
    if meshes_ratio is not None:
        print(f"igneous / shardwright time, meshes alone: {meshes_ratio}")
    if skeletons_ratio is not None:
        print(f"igneous / shardwright time, skeletons alone: {skeletons_ratio}")
    print(f"wrote {out}")


def runs(args: argparse.Namespace) -> dict[str, Any]:
    """The tool runs asked for, by name: each a function of (source, work) returning its
    record and its output folder (None where it failed)."""
    block = our_block(args)
    every = {
        "igneous": lambda src, work: run_igneous(args, src, work),
        "igneous_skeletons_at_block": lambda src, work: run_igneous(
            args, src, work, "igneous_skeletons_at_block",
            igneous_parameters(args, (SKELETONS,), block),
        ),
        "igneous_meshes": lambda src, work: run_igneous(
            args, src, work, "igneous_meshes", igneous_parameters(args, (MESHES,))
        ),
        "igneous_skeletons": lambda src, work: run_igneous(
            args, src, work, "igneous_skeletons", igneous_parameters(args, (SKELETONS,))
        ),
        "shardwright": lambda src, work: run_shardwright(args, src, work),
        "shardwright_meshes": lambda src, work: run_shardwright(
            args, src, work, "shardwright_meshes", (MESHES,)
        ),
        "shardwright_skeletons": lambda src, work: run_shardwright(
            args, src, work, "shardwright_skeletons", (SKELETONS,)
        ),
    }  # fmt: skip
    wanted = set(args.only.split(",")) if args.only else set(RUNS)
    if args.skip_igneous:
        wanted -= {n for n in RUNS if n.startswith("igneous")}
    if args.skip_shardwright:
        wanted -= {n for n in RUNS if n.startswith("shardwright")}
    if args.skip_meshes_alone:
        wanted -= {"igneous_meshes", "shardwright_meshes"}
    if args.skip_skeletons_alone:
        wanted -= {"igneous_skeletons", "shardwright_skeletons"}
    unknown = wanted - set(RUNS)
    if unknown:
        raise SystemExit(f"--only: no run named {', '.join(sorted(unknown))}; runs: {RUNS}")
    return {name: every[name] for name in RUNS if name in wanted}


def time_ratio(tools: dict[str, dict[str, Any]], slow: str, fast: str) -> float | None:
    """Wall seconds of `slow` over `fast`, where both ran without error."""
    a, b = tools.get(slow, {}), tools.get(fast, {})
    if "error" in a or "error" in b or not a.get("wall_seconds") or not b.get("wall_seconds"):
        return None
    return round(a["wall_seconds"] / b["wall_seconds"], 3)


if __name__ == "__main__":
    main()
