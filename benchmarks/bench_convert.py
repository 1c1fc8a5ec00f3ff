"""Whole-process conversion time: shardwright vs TensorStore and zarr-python (its own
pipeline and the `zarrs` one) on the same volume, with the same chunking and sharding, in the
same run, and each case against this machine's limit for its work.

Cases (512 MiB volumes; `--scale 4` for 2 GiB):
  precomputed raw, uint8 EM-like image                      limit: one copy of the source
  precomputed raw + gzip, same image                        limit: gzip of every chunk
  precomputed compressed_segmentation + gzip, uint64 labels limit: cseg + gzip of every chunk
  zarr3 gzip, same image                                    limit: gzip of every chunk
  zarr3 zstd, same image                                    limit: zstd of every chunk

Each tool runs in its own fresh Python process (start-up, imports and, for us, where the
default starts one, the local Dask cluster included; ours as a user runs it, plan report and
progress on, their output discarded) and must read the .npy source and write the sharded
dataset to local disk. Every output is read back and compared with the source before its
time counts.

The limits: for raw output, one read and one write of the bytes (`shutil.copyfile` of the
source, through the page cache like the conversions); for a codec-bound case, the codec's own
time on the very chunks of the conversion, in one thread, divided by the cores (the fastest
implementation on the machine: ISA-L for gzip at the level the plan maps to, `zstandard`, the
faster of the reference compressed_segmentation library and ours). `ratio_limit_over_ours` is
that time over our whole-process time (1.0 = the machine's limit, start-up included). Next to
it, `codec_all_cores_s`: the same work run by one thread per core at once, what the cores
deliver together with the threads of one process, and `codec_all_processes_s`, shared by one
process per core (no lock between them); in both, each core takes its share of the chunks out
of the source before the timing starts, and the shares start together;
`ratio_all_cores_limit_over_ours` is against the former. The floors of the bytes' way in and
out, each on every core at once: `read_source_s`, the source read once into memory (page
cache to a buffer each thread reuses), and
`write_output_s`, as many bytes as our output holds written once to new files (from a buffer
each thread reuses). `reachable_s`: our start-up and imports, the read floor, the case's codec
work at the machine's limit (the faster of the two all-core codec times; none for raw) and the
write floor, the best any converter started like ours could do on this machine, and
`ratio_reachable_over_ours`; `reachable_without_write_s` and its ratio leave the write out (on
a machine of few cores the write of an output as large as its source takes a core's time that
no converter can hide). Every limit and the start-up are measured in each round, right after
the tools (best of the rounds): this machine's speed drifts by up to 2x over minutes, and a
limit measured apart from the runs it is compared with says little. Every timed run and floor
starts once the page cache holds no unwritten data (`os.sync()`, not timed): writes that an
earlier run left for the kernel to flush cost the next one up to twice its time.

`gather_source_s`: every chunk cut out of the mapped source once, shard by shard, on every
core (one map shared by the threads, each chunk copied into a buffer the thread reuses). A
chunk's rows lie apart in a C-ordered volume, so a chunked output reads its source this way,
not in order; `reachable_gathered_s` is `reachable_s` with this floor in place of the read
floor, and `ratio_reachable_gathered_over_ours` our fraction of it.

`bare_s`: the same work done by a converter of nothing else, started like ours (`bare_pipeline`:
threads of one process cutting each shard's chunks out of the mapped source, encoding them as
we do and writing them to one file per shard; no format, index, checksum or bookkeeping), and
`ratio_bare_over_ours`: how much of our time is the work itself, as Python on these libraries
does it, rather than the floors' sum, which no program reaches (the floors read into and write
from a buffer that stays in the cores' caches; a conversion maps the source page by page and
writes bytes it has just made).

The fixed cost of a small job: the raw case at 512 MiB on a local cluster (`--scheduler local`,
the default before a job under 4 GiB ran on threads of its process) and on threads (the default
now), same process start-up; the difference is what the cluster costs.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import compressed_segmentation as reference_cseg
import numpy as np
import tensorstore as ts
from isal import igzip

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import cli_options, compile_package, dir_bytes, write_result  # noqa: E402

from shardwright import api  # noqa: E402
from shardwright.cli.demo import write_demo_volumes  # noqa: E402
from shardwright.codecs.compressed_segmentation import CompressedSegmentationEncoding  # noqa: E402
from shardwright.codecs.gzip import isal_level  # noqa: E402
from shardwright.codecs.zstd import ZstdCodec  # noqa: E402
from shardwright.common.arrays import copy_runs  # noqa: E402

TENSORSTORE_PRECOMPUTED = """
import json, sys, numpy as np, tensorstore as ts
src, dest, info = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = np.load(src, mmap_mode="r")
scale = info["scales"][0]
store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/",
                 "multiscale_metadata": {k: info[k] for k in ("type", "data_type",
                                                              "num_channels")},
                 "scale_metadata": {k: scale[k] for k in scale if k != "chunk_sizes"}
                 | {"chunk_size": scale["chunk_sizes"][0]},
                 "create": True}).result()
store[...].write(data.T[..., None]).result()
"""

TENSORSTORE_ZARR3 = """
import json, sys, numpy as np, tensorstore as ts
src, dest, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = np.load(src, mmap_mode="r")
store = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/", "metadata": meta,
                 "create": True}).result()
store.write(data).result()
"""

ZARR_PYTHON = """
import json, sys, numpy as np, zarr
from zarr.codecs import GzipCodec, ZstdCodec
src, dest, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if sys.argv[4] == "zarrs":
    import zarrs  # noqa: F401  (registers the pipeline)
    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
data = np.load(src, mmap_mode="r")
sharding = meta["codecs"][0]["configuration"]
codec = sharding["codecs"][1]
compressor = {"gzip": GzipCodec, "zstd": ZstdCodec}[codec["name"]](**codec["configuration"])
arr = zarr.create_array(dest, shape=data.shape, dtype=data.dtype,
                        shards=meta["chunk_grid"]["configuration"]["chunk_shape"],
                        chunks=sharding["chunk_shape"], compressors=compressor,
                        dimension_names=meta.get("dimension_names"), fill_value=0)
arr[...] = data
"""

ZARR_PIPELINES = {"zarr_python": "default", "zarr_python_zarrs": "zarrs"}

# A codec-bound case's work, stage by stage, each with the implementations to take the fastest of.
Encoders = list[tuple[str, list[Callable[[Any], Any]]]]
GZIP = ("gzip", [lambda data: igzip.compress(data, isal_level(6), mtime=0)])
ZSTD = ("zstd", [ZstdCodec(level=3).compress])  # a compressor context per thread
CSEG = (
    "compressed_segmentation",
    [
        lambda zyx: CompressedSegmentationEncoding().encode(zyx.T),
        lambda zyx: reference_cseg.compress(zyx.T, block_size=(8, 8, 8), order="F"),
    ],
)


def _timed(args: list[str]) -> float:
    """Seconds of a fresh process (its progress and reports discarded, shown if it fails),
    started once the page cache holds nothing unwritten."""
    os.sync()
    started = time.perf_counter()
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{args} failed ({done.returncode}):\n{done.stderr}")
    return time.perf_counter() - started


def _check(dest: str, driver: str, want_xyz_or_zyx: np.ndarray, lossy: bool = False) -> None:
    store = ts.open({"driver": driver, "kvstore": f"file://{dest}/"}).result()
    if driver == "neuroglancer_precomputed":
        # TensorStore reorders [x, y, z] into the source's z, y, x as it reads: comparing a
        # transposed 2 GiB view element by element took minutes.
        store = store[ts.d["channel"][0]].T
    got = np.asarray(store.read().result())
    if not np.array_equal(got, want_xyz_or_zyx):
        raise AssertionError(f"{dest}: output differs from the source")


def run_case(
    name: str,
    source: str,
    workdir: pathlib.Path,
    options: dict[str, Any],
    peers: list[str],
    scheduler: str | None,
    workers: int | None,
    repeat: int,
    measures: dict[str, Callable[[], float]],
    cores: int,
) -> dict[str, Any]:
    """Best of `repeat` runs of each tool and of each of this machine's `measures` (limits,
    start-up) and of the write floor of our output (`write_output_s`), all taking turns in
    every round: the machine's speed drifts by up to 2x over minutes, so a limit measured
    apart from the runs it is compared with says little. Outputs are checked each time."""
    data = np.load(source, mmap_mode="r")
    ours_dest = str(workdir / f"{name}-ours")
    plan = api.plan(source, ours_dest, **options)
    precomputed = plan.format == "precomputed"
    driver = "neuroglancer_precomputed" if precomputed else "zarr3"
    cmd = [
        sys.executable,
        "-m",
        "shardwright.cli",
        "convert",
        source,
        ours_dest,
        *cli_options(options),
    ]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    if workers:
        cmd += ["--workers", str(workers)]
    runs: dict[str, list[str]] = {"ours": cmd}
    _, metadata = plan.metadata_document()
    for peer in peers:
        dest = str(workdir / f"{name}-{peer}")
        if peer == "tensorstore":
            script = TENSORSTORE_PRECOMPUTED if precomputed else TENSORSTORE_ZARR3
            runs[peer] = [sys.executable, "-c", script, source, dest, json.dumps(metadata)]
        else:
            runs[peer] = [
                *[sys.executable, "-c", ZARR_PYTHON, source, dest, json.dumps(metadata)],
                ZARR_PIPELINES[peer],
            ]
    figures: dict[str, Any] = {"source_bytes": int(data.nbytes), "plan": plan.describe()}
    best = {tool: float("inf") for tool in runs}
    destinations = {tool: ours_dest if tool == "ours" else args[4] for tool, args in runs.items()}
    measured = dict.fromkeys([*measures, "write_output_s"], float("inf"))
    for _ in range(repeat):
        for tool, args in runs.items():
            dest = destinations[tool]
            shutil.rmtree(dest, ignore_errors=True)
            best[tool] = min(best[tool], _timed(args))
            _check(dest, driver, data)
            figures[f"{tool}_output_bytes"] = dir_bytes(dest)
            shutil.rmtree(dest)
        for measure, run in measures.items():
            measured[measure] = min(measured[measure], run())
        written = min(
            write_floor(figures["ours_output_bytes"], workdir, cores)
            for _ in range(WRITE_FLOOR_TRIES)
        )
        measured["write_output_s"] = min(measured["write_output_s"], written)
    for tool, seconds in best.items():
        figures[f"{tool}_s"] = seconds
        if tool != "ours":
            figures[f"ratio_{tool}_over_ours"] = seconds / best["ours"]
    figures["measured"] = measured
    return figures


def copy_once(source: str, workdir: pathlib.Path) -> float:
    """One read and one write of the source's bytes: what raw output cannot beat."""
    copy = workdir / "copy-limit.bin"
    os.sync()
    started = time.perf_counter()
    shutil.copyfile(source, copy)
    seconds = time.perf_counter() - started
    copy.unlink()
    return seconds


FLOOR_BUFFER = 8 << 20  # what each thread of a read or write floor moves per call
# Tries of the write floor per round: one write in a few on this machine stalls for up to ten
# times its time, page cache clean or not (0.2 s or 1.9 s for the same 1.9 GB, back to back).
WRITE_FLOOR_TRIES = 3


def _on_threads(work: Callable[[int], None], parts: int, cores: int) -> float:
    """Seconds `cores` threads take to run `work(0)` ... `work(parts - 1)`, started once the
    page cache holds nothing unwritten (the sync not timed)."""
    os.sync()
    with ThreadPoolExecutor(cores) as pool:
        started = time.perf_counter()
        list(pool.map(work, range(parts)))
        return time.perf_counter() - started


def read_floor(source: str, cores: int) -> float:
    """The source's bytes read once by `cores` threads at once, each its share into a buffer
    it reuses: what reading the source costs any converter on this machine."""
    size = os.path.getsize(source)
    shares = np.linspace(0, size, cores + 1).astype(np.int64).tolist()

    def read_share(part: int) -> None:
        buffer = bytearray(FLOOR_BUFFER)
        with open(source, "rb", buffering=0) as f:
            f.seek(shares[part])
            left = shares[part + 1] - shares[part]
            while left > 0:
                with memoryview(buffer)[: min(left, FLOOR_BUFFER)] as view:
                    got = f.readinto(view)
                if not got:
                    break
                left -= got

    return _on_threads(read_share, cores, cores)


def write_floor(nbytes: int, workdir: pathlib.Path, cores: int) -> float:
    """`nbytes` written once to new files by `cores` threads at once, each its share from a
    buffer it reuses: what writing an output of that size costs any converter here."""
    shares = np.linspace(0, nbytes, cores + 1).astype(np.int64).tolist()
    paths = [workdir / f"write-floor-{part}.bin" for part in range(cores)]
    pattern = np.random.default_rng(0).integers(0, 256, FLOOR_BUFFER, dtype=np.uint8).tobytes()

    def write_share(part: int) -> None:
        left = shares[part + 1] - shares[part]
        with open(paths[part], "wb", buffering=0) as f, memoryview(pattern) as view:
            while left > 0:
                left -= f.write(view[: min(left, FLOOR_BUFFER)])

    seconds = _on_threads(write_share, cores, cores)
    for path in paths:
        path.unlink()
    return seconds


def _shard_work(
    shape: tuple[int, ...], chunk_zyx: tuple[int, int, int], shard_zyx: tuple[int, int, int]
) -> tuple[list[int], list[tuple[int, ...]], list[tuple[int, ...]]]:
    """A shard's box in voxels, the corners of a volume's shard boxes and, inside one box,
    the corners of its chunks (the volumes are whole shards)."""
    box = [c * s for c, s in zip(chunk_zyx, shard_zyx, strict=True)]
    corners = list(itertools.product(*(range(0, n, b) for n, b in zip(shape, box, strict=True))))
    steps = list(itertools.product(*(range(0, b, c) for b, c in zip(box, chunk_zyx, strict=True))))
    return box, corners, steps


def _cut(region: np.ndarray, corner: tuple[int, ...], chunk: np.ndarray) -> np.ndarray:
    """The chunk at `corner` of a shard's region copied into `chunk` (rows moved whole)."""
    z, y, x = corner
    cz, cy, cx = chunk.shape
    copy_runs(chunk, region[z : z + cz, y : y + cy, x : x + cx])
    return chunk


def gather_floor(
    source: str,
    chunk_zyx: tuple[int, int, int],
    shard_zyx: tuple[int, int, int],
    cores: int,
) -> float:
    """Every chunk of the source cut out of it once, shard by shard, by `cores` threads at
    once, each into a buffer it reuses, from one map of the source that every thread shares:
    the source read as a chunked format must read it (a chunk's rows lie apart in the
    source), which no converter of a C-ordered volume can skip. It includes the read floor's
    work (the bytes leave the page cache here too)."""
    data = np.load(source, mmap_mode="r")
    box, corners, steps = _shard_work(data.shape, chunk_zyx, shard_zyx)

    def shard(number: int) -> None:
        z0, y0, x0 = corners[number]
        region = data[z0 : z0 + box[0], y0 : y0 + box[1], x0 : x0 + box[2]]
        reused = np.empty(chunk_zyx, data.dtype)
        for corner in steps:
            _cut(region, corner, reused)

    return _on_threads(shard, len(corners), cores)


def bare_pipeline(
    source: str,
    chunk_zyx: tuple[int, int, int],
    shard_zyx: tuple[int, int, int],
    encoders: Encoders | None,
    cores: int,
    workdir: pathlib.Path,
) -> float:
    """The case's work and nothing else, run as ours runs a small job (threads of one
    process): `cores` threads take the shards' boxes in turn, each maps the source, cuts its
    chunks out one by one (rows moved whole), encodes each as the converter does (raw: keeps
    the copy) and writes them to one file per shard. No format, index, checksum, plan, fill
    check or bookkeeping: what a converter written for this one case on the same libraries
    takes, the practical floor of a Python converter here (the volumes are whole shards)."""
    data = np.load(source, mmap_mode="r")
    offset, shape, dtype = data.offset, data.shape, data.dtype
    box, corners, steps = _shard_work(shape, chunk_zyx, shard_zyx)
    folder = workdir / "bare-pipeline"
    folder.mkdir(exist_ok=True)

    def shard(number: int) -> None:
        z0, y0, x0 = corners[number]
        region = np.memmap(source, dtype, "r", offset, shape)[
            z0 : z0 + box[0], y0 : y0 + box[1], x0 : x0 + box[2]
        ]
        reused = np.empty(chunk_zyx, dtype)
        pieces: list[Any] = []
        for corner in steps:
            encoded: Any = _cut(region, corner, reused if encoders else np.empty(chunk_zyx, dtype))
            for _, implementations in encoders or []:
                encoded = implementations[0](encoded)
            pieces.append(encoded)
        with open(folder / str(number), "wb") as out:
            for piece in pieces:
                out.write(piece)

    seconds = _on_threads(shard, len(corners), cores)
    shutil.rmtree(folder)
    return seconds


def start_and_imports(source: str) -> float:
    """A fresh Python process importing what our convert command imports for this source: the
    job's modules, and distributed where the job starts a cluster (one reading 4 GiB or more;
    a smaller one runs on threads of its process)."""
    from shardwright.jobs.cluster import SMALL_JOB_BYTES

    modules = "shardwright.cli, shardwright.api, shardwright.jobs.pending"
    if np.load(source, mmap_mode="r").nbytes >= SMALL_JOB_BYTES:
        modules += ", distributed"
    return _timed([sys.executable, "-c", f"import {modules}"])


def _chunks(source: str, chunk_zyx: tuple[int, int, int]) -> Iterator[np.ndarray]:
    """Every chunk of the source, C-contiguous (z, y, x): the bytes a raw chunk holds."""
    data = np.load(source, mmap_mode="r")
    cz, cy, cx = chunk_zyx
    for z in range(0, data.shape[0], cz):
        for y in range(0, data.shape[1], cy):
            for x in range(0, data.shape[2], cx):
                yield np.ascontiguousarray(data[z : z + cz, y : y + cy, x : x + cx])


def codec_one_thread(source: str, chunk_zyx: tuple[int, int, int], encoders: Encoders) -> float:
    """The codec's own time on every chunk of the conversion, one thread; for each stage the
    fastest of the implementations given (chunks taken out untimed)."""
    seconds = 0.0
    for chunk in _chunks(source, chunk_zyx):
        data: Any = chunk
        for _, implementations in encoders:
            fastest = float("inf")
            for encode in implementations:
                started = time.perf_counter()
                out = encode(data)
                fastest = min(fastest, time.perf_counter() - started)
            seconds += fastest
            data = out
    return seconds


def _encode_as_converter(encoders: Encoders, chunk: np.ndarray) -> None:
    """A chunk through each stage's first implementation, the one the converter uses."""
    data: Any = chunk
    for _, implementations in encoders:
        data = implementations[0](data)


def _share(source: str, chunk_zyx: tuple[int, int, int], part: int, parts: int) -> list[np.ndarray]:
    """Every `parts`-th chunk of the source from `part`: one core's share of the codec work,
    taken out of the source before any timing starts."""
    return list(itertools.islice(_chunks(source, chunk_zyx), part, None, parts))


def codec_all_cores(
    source: str, chunk_zyx: tuple[int, int, int], encoders: Encoders, cores: int
) -> float:
    """The same codec work run by `cores` threads at once (as the converter encodes), each
    its share, all started together: what the cores deliver together to one process's
    threads."""
    shares = [_share(source, chunk_zyx, part, cores) for part in range(cores)]

    def encode_share(part: int) -> None:
        for chunk in shares[part]:
            _encode_as_converter(encoders, chunk)

    return _on_threads(encode_share, cores, cores)


_FORKED_ENCODERS: Encoders = []  # what forked encoding processes run (lambdas do not pickle)


def _encode_share(
    source: str,
    chunk_zyx: tuple[int, int, int],
    part: int,
    parts: int,
    start: Any,
    results: Any,
) -> None:
    """One forked process's share of the codec work: every `parts`-th chunk from `part`,
    taken out of the source first (untimed), then encoded as the converter encodes once every
    process has its share (`start`, a barrier), so that the shares run at once; the seconds
    go to `results`."""
    share = _share(source, chunk_zyx, part, parts)
    start.wait()
    started = time.perf_counter()
    for chunk in share:
        _encode_as_converter(_FORKED_ENCODERS, chunk)
    results.put(time.perf_counter() - started)


SHARE_TIMEOUT_S = 600  # longer than any share of a 2 GiB volume takes here


def codec_all_processes(
    source: str, chunk_zyx: tuple[int, int, int], encoders: Encoders, cores: int
) -> float:
    """The same codec work shared by one forked process per core, every share encoded at the
    same time: what the cores deliver with no lock between them (the slowest share counts).
    Shares that took their chunks out of the source between encodes would overlap only in
    part and each run at the speed of a core working alone."""
    _FORKED_ENCODERS[:] = encoders
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(cores), context.Queue()
    processes = [
        context.Process(target=_encode_share, args=(source, chunk_zyx, part, cores, start, results))
        for part in range(cores)
    ]
    for process in processes:
        process.start()
    try:
        # a share that failed puts nothing: its traceback is on stderr, and this gives up
        return max(results.get(timeout=SHARE_TIMEOUT_S) for _ in processes)
    finally:
        for process in processes:
            process.kill()
            process.join()


FIXED_COST_ROUNDS = 8  # the cluster's cost (~0.2 s) is small next to the machine's drift


def fixed_cost(source: str, workdir: pathlib.Path, repeat: int) -> dict[str, float]:
    """The same small raw job on a local cluster (`--scheduler local`, the default before jobs
    under 4 GiB ran on threads of their process) and on threads (the default now), taking
    turns, best of `repeat` rounds each."""
    dest = workdir / "fixed-cost"
    base = [sys.executable, "-m", "shardwright.cli", "convert", source, str(dest)]
    base += ["--chunk-size", "64,64,64", "--resolution", "8,8,40"]
    best = {"local": float("inf"), "threads": float("inf")}
    for _ in range(repeat):
        for scheduler in best:
            shutil.rmtree(dest, ignore_errors=True)
            best[scheduler] = min(best[scheduler], _timed([*base, "--scheduler", scheduler]))
    shutil.rmtree(dest, ignore_errors=True)
    return {
        "source_bytes": int(np.load(source, mmap_mode="r").nbytes),
        "local_s": best["local"],
        "threads_s": best["threads"],
        "cluster_cost_s": best["local"] - best["threads"],
    }


def floors(source: str, workdir: pathlib.Path, repeat: int) -> dict[str, Any]:
    """What no tool can beat on this machine, to read the ratios against: starting Python
    with our imports and a local Dask cluster's, starting Python with TensorStore's, and
    copying the source's bytes once (read + write through the page cache, no reordering)."""
    theirs = [sys.executable, "-c", "import numpy, tensorstore"]
    return {
        "ours_start_and_imports_s": min(start_and_imports(source) for _ in range(repeat)),
        "tensorstore_start_and_imports_s": min(_timed(theirs) for _ in range(repeat)),
        "copy_source_once_s": min(copy_once(source, workdir) for _ in range(repeat)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="64 MiB volumes, for a smoke run")
    parser.add_argument(
        "--scheduler", help="passed to shardwright convert (default: local distributed cluster)"
    )
    parser.add_argument("--workers", type=int)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per tool")
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        help="volumes N times deeper (z), to see how the ratios move as start-up weighs less",
    )
    parser.add_argument("--cases", help="comma-separated subset of the cases to run")
    args = parser.parse_args()
    compile_package()
    image_size = (512, 512, 256) if args.quick else (1024, 1024, 512 * args.scale)
    label_size = (256, 256, 128) if args.quick else (512, 512, 256 * args.scale)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="sw-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    image = str(workdir / "image-{}x{}x{}.npy".format(*image_size))
    labels = str(workdir / "labels-{}x{}x{}.npy".format(*label_size))
    if not os.path.exists(image):
        write_demo_volumes(image_size, image, None)
    if not os.path.exists(labels):
        write_demo_volumes(label_size, None, labels)
    common = {"chunk_size": (64, 64, 64), "resolution": (8, 8, 40)}
    zarr3 = {**common, "format": "zarr3", "zarr_layout": "array"}
    chunk = (64, 64, 64)
    zarr_peers = ["tensorstore", "zarr_python", "zarr_python_zarrs"]
    cases: dict[str, tuple[str, dict[str, Any], list[str], Encoders | None]] = {
        "precomputed_raw": (image, {**common, "compression": "none"}, ["tensorstore"], None),
        "precomputed_gzip": (image, {**common, "compression": "gzip"}, ["tensorstore"], [GZIP]),
        "precomputed_cseg": (
            labels,
            {**common, "encoding": "compressed_segmentation", "layer_type": "segmentation"},
            ["tensorstore"],
            [CSEG, GZIP],
        ),
        # bare arrays, as the peers write them (ours default to an OME-Zarr group over `0/`)
        "zarr3_gzip": (
            image,
            {**zarr3, "compression": "gzip"},
            zarr_peers,
            [GZIP],
        ),
        "zarr3_zstd": (
            image,
            {**zarr3, "compression": "zstd"},
            zarr_peers,
            [ZSTD],
        ),
    }
    if args.cases:
        cases = {name: cases[name] for name in args.cases.split(",")}
    figures: dict[str, Any] = {}
    cores = os.cpu_count() or 1
    for name, (source, options, peers, encoders) in cases.items():
        shard_xyz = api.plan(source, str(workdir / "bare"), **options).describe()[
            "shard_shape_chunks_xyz"
        ]
        measures: dict[str, Callable[[], float]] = {
            "start_and_imports_s": functools.partial(start_and_imports, source),
            "read_source_s": functools.partial(read_floor, source, cores),
            "gather_source_s": functools.partial(
                gather_floor, source, chunk, tuple(shard_xyz[::-1]), cores
            ),
            "bare_pipeline_s": functools.partial(
                bare_pipeline, source, chunk, tuple(shard_xyz[::-1]), encoders, cores, workdir
            ),
        }
        if encoders is None:
            measures["copy_s"] = functools.partial(copy_once, source, workdir)
        else:
            measures["codec_one_thread_s"] = functools.partial(
                codec_one_thread, source, chunk, encoders
            )
            for key, measure in (
                ("codec_all_cores_s", codec_all_cores),
                ("codec_all_processes_s", codec_all_processes),
            ):
                measures[key] = functools.partial(measure, source, chunk, encoders, cores)
        figures[name] = case = run_case(
            name,
            source,
            workdir,
            options,
            peers,
            args.scheduler,
            args.workers,
            args.repeat,
            measures,
            cores,
        )
        m = case["measured"]
        if encoders is None:
            case["limit"] = {"kind": "copy", "limit_s": m["copy_s"]}
            work = 0.0
        else:
            case["limit"] = {
                "kind": "codec",
                "cores": cores,
                "limit_s": m["codec_one_thread_s"] / cores,
            }
            case["ratio_all_cores_limit_over_ours"] = m["codec_all_cores_s"] / case["ours_s"]
            work = min(m["codec_all_cores_s"], m["codec_all_processes_s"])
        case["ratio_limit_over_ours"] = case["limit"]["limit_s"] / case["ours_s"]
        # The best a converter started like ours could do: its start-up, the source read, the
        # codec on every core (threads or processes) and the output written, at this machine's
        # limits; and the same without the write.
        without_write = m["start_and_imports_s"] + m["read_source_s"] + work
        case["reachable_without_write_s"] = without_write
        case["ratio_reachable_without_write_over_ours"] = without_write / case["ours_s"]
        case["reachable_s"] = without_write + m["write_output_s"]
        case["ratio_reachable_over_ours"] = case["reachable_s"] / case["ours_s"]
        # The same with the chunks gathered out of the source instead of its bytes read in
        # order: the floor of the work a chunked output makes of a C-ordered volume.
        case["reachable_gathered_s"] = (
            m["start_and_imports_s"] + m["gather_source_s"] + work + m["write_output_s"]
        )
        case["ratio_reachable_gathered_over_ours"] = case["reachable_gathered_s"] / case["ours_s"]
        # The same work by a converter of nothing else, started like ours.
        case["bare_s"] = m["start_and_imports_s"] + m["bare_pipeline_s"]
        case["ratio_bare_over_ours"] = case["bare_s"] / case["ours_s"]
        ratios = {k: round(v, 2) for k, v in case.items() if k.startswith("ratio")}
        print(f"{name}: ours {case['ours_s']:.2f} s  {ratios}", flush=True)
    small = str(workdir / "image-1024x1024x512.npy")
    if not os.path.exists(small):
        write_demo_volumes((1024, 1024, 512), small, None)
    figures["fixed_cost"] = fixed = fixed_cost(small, workdir, max(args.repeat, FIXED_COST_ROUNDS))
    print(f"fixed cost: {json.dumps({k: round(v, 3) for k, v in fixed.items()})}", flush=True)
    figures["floors"] = floor = floors(image, workdir, args.repeat)
    # The best ratio any converter started like ours could reach on the raw image: TensorStore's
    # time over our start-up plus one plain copy of the bytes.
    if "precomputed_raw" in figures:
        floor["max_ratio_tensorstore_over_ours_raw"] = figures["precomputed_raw"][
            "tensorstore_s"
        ] / (floor["ours_start_and_imports_s"] + floor["copy_source_once_s"])
    print(f"floors: {json.dumps({k: round(v, 3) for k, v in floor.items()})}")
    figures["setup"] = {
        "repeat": args.repeat,
        "image_xyz": image_size,
        "labels_xyz": label_size,
        "scheduler": args.scheduler or "local",
        "workers": args.workers,
        "cpus": os.cpu_count(),
    }
    name = "convert-quick" if args.quick else "convert"
    if args.scale > 1:
        name += f"-x{args.scale}"
    if args.cases:
        name += "-" + "-".join(cases)  # a subset never replaces a whole run's record
    path = write_result(
        name,
        figures,
        (
            *("shardwright", "tensorstore", "zarr", "zarrs", "dask", "distributed", "isal"),
            *("zstandard", "compressed-segmentation"),
        ),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
