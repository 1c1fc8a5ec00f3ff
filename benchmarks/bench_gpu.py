"""The GPU engine measured, against its targets and the CPU engine of the same machine.

Per case (precomputed raw, gzip and compressed_segmentation; zarr3 zstd):
- **device path**: every shard of the volume through the batched pipeline
  (`run_shard_batched`) from a host array source (pinned memory under CuPy) into a sink that
  only measures (size and crc32c, nothing stored): input GB/s and each stage's seconds (read,
  h2d, scatter, encode, aggregate, d2h, write), each stage waited for, so the bottleneck shows;
  the device memory the pool held at most. gzip and zstd run twice: compressed on the host (the
  engine's default today) and by nvCOMP on the device (`device_path_nvcomp`; its decoding is
  checked by the GPU tests);
- **concurrent shard tasks**: the same device path with 2 and 4 tasks at once, each in its own
  thread on its own CUDA stream (what a GPU worker's threads do: `GPU_TASKS_PER_DEVICE`), the
  byte codecs on the device: input GB/s;
- **end to end**: `shardwright.convert` of the same volume saved as .npy on local disk, GPU
  engine (its dask-cuda cluster) and CPU engine (a local cluster on every core): seconds and
  their ratio; and the GPU engine on a dask-cuda cluster started beforehand with 1, 2 and 4
  task threads per GPU (the job alone, no cluster start);
- **parity**: the GPU output read back by TensorStore equals the source, and raw shards equal
  the CPU engine's byte for byte (gzip and zstd, compressed_segmentation's gzip included, are
  nvCOMP's bytes on the GPU engine).

`--xp numpy` runs the device path on the NumPy twin and the end-to-end job on the CPU engine
only: the script's own smoke test, anywhere (`--quick` makes the volumes small).
Run on a GPU machine: `python benchmarks/bench_gpu.py --xp cupy --out DIR` (4 GiB volumes).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import RESULTS, versions, write_result  # noqa: E402

from shardwright import api  # noqa: E402
from shardwright.engine.batched import BatchCompressor, run_shard_batched  # noqa: E402
from shardwright.engine.stages import Stages  # noqa: E402
from shardwright.formats.shardfile import write_pieces  # noqa: E402
from shardwright.jobs.workers import GPU_RESOURCE  # noqa: E402
from shardwright.sources.base import ArraySource  # noqa: E402
from shardwright.stores.retry import RequestCounter  # noqa: E402

GiB = 1 << 30
CHUNK = (64, 64, 64)
# Device-path targets per H100, GB/s of input (the acceptance).
TARGETS = {"raw": 25.0, "gzip": 8.0, "zstd": 10.0, "compressed_segmentation": 20.0}
CASES: dict[str, dict[str, Any]] = {
    "raw": {"kind": "image", "options": {"compression": "none"}},
    "gzip": {"kind": "image", "options": {"compression": "gzip"}},
    "compressed_segmentation": {
        "kind": "labels",
        "options": {"encoding": "compressed_segmentation", "layer_type": "segmentation"},
    },
    "zstd": {"kind": "image", "options": {"format": "zarr3", "compression": "zstd"}},
}
PACKAGES = (
    "shardwright", "numpy", "cupy-cuda13x", "cupy-cuda12x", "nvidia-nvcomp-cu13",
    "nvidia-nvcomp-cu12", "dask", "distributed", "dask-cuda", "tensorstore", "isal",
)  # fmt: skip


class HostArraySource(ArraySource):
    """A volume already in host memory (pinned under CuPy): the device path without disk."""

    def __init__(self, array: np.ndarray):
        self.array = array
        super().__init__("memory://bench", array.shape, array.dtype, "zyx")

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        return self.array[slices]


class MeasuringSink:
    """Takes each shard's bytes as a store would, keeps only their size and crc32c."""

    url = "memory://sink"

    def __init__(self) -> None:
        self.requests = RequestCounter()
        self.bytes = 0
        self._lock = threading.Lock()  # concurrent shard tasks write to one sink

    def write_object(self, key: str, pieces: Any) -> tuple[int, int]:
        size, crc = write_pieces(pieces(), None)
        with self._lock:
            self.bytes += size
        return size, crc


def volume_shape(kind: str, nbytes: int) -> tuple[np.dtype, int, int]:
    """(dtype, side, tile) of a cube of about `nbytes`: a multiple of the chunk, tiled by a
    block of at most 256^3."""
    dtype = np.dtype(np.uint8 if kind == "image" else np.uint64)
    side = max(64, int(round((nbytes / dtype.itemsize) ** (1 / 3) / 64)) * 64)
    return dtype, side, min(side, 256)


def tile_block(kind: str, tile: int) -> np.ndarray:
    """An EM-like image block (uint8: smooth structure plus noise) or blocky uint64 labels."""
    rng = np.random.default_rng(0)
    if kind == "image":
        coarse = rng.normal(128, 40, (tile // 8,) * 3).repeat(8, 0).repeat(8, 1).repeat(8, 2)
        return np.clip(coarse + rng.normal(0, 12, (tile,) * 3), 0, 255).astype(np.uint8)
    labels = rng.integers(1, 2**40, (tile // 16,) * 3, dtype=np.uint64)
    return labels.repeat(16, 0).repeat(16, 1).repeat(16, 2)


def volume(kind: str, nbytes: int) -> np.ndarray:
    """A volume of about `nbytes` as tiles of one block (each chunk is compressed on its own,
    so repeats across tiles make nothing easier)."""
    _, side, tile = volume_shape(kind, nbytes)
    reps = -(-side // tile)
    block = tile_block(kind, tile)
    return np.ascontiguousarray(np.tile(block, (reps,) * 3)[:side, :side, :side])


def device_path(
    case: dict[str, Any],
    array: np.ndarray,
    xp: Any,
    work: pathlib.Path,
    nvcomp: bool = False,
    concurrency: int = 1,
    source: ArraySource | None = None,
) -> dict:
    """Every shard through the batched pipeline into the measuring sink (`nvcomp`: byte codecs
    compressed on the device), `concurrency` tasks at once, each on its thread's own stream
    (one at a time: each stage timed, and waited for). `source`: read instead of `array`
    (the same voxels, e.g. the .npy it was saved as)."""
    from_source = source or HostArraySource(array)
    plan = api.plan(from_source, str(work / "unused"), chunk_size=CHUNK, **case["options"])
    tasks = list(plan.shards())
    sink = MeasuringSink()
    compressor: BatchCompressor | None = None
    if nvcomp:
        from shardwright.engine.gpu import device_compressor

        compressor = device_compressor(plan)
    stages = Stages(xp) if concurrency == 1 else None

    def run(task: Any, into: Any = sink, timed: Stages | None = stages) -> None:
        with task_stream(xp):
            run_shard_batched(plan, task, into, xp, compressor=compressor, stages=timed)

    pool = xp.get_default_memory_pool() if xp is not np else None
    peak = 0
    with ThreadPoolExecutor(concurrency) as threads:  # each thread warmed up: buffers, codecs
        list(threads.map(lambda t: run(t, MeasuringSink(), None), tasks[:concurrency]))
        if pool is not None:
            pool.free_all_blocks()
        started = time.perf_counter()
        for _ in threads.map(run, tasks):
            if pool is not None:
                peak = max(peak, pool.total_bytes())
        seconds = time.perf_counter() - started
    out = {
        "shards": len(tasks),
        "concurrency": concurrency,
        "input_bytes": int(array.nbytes),
        "output_bytes": sink.bytes,
        "seconds": round(seconds, 4),
        "input_GBps": round(array.nbytes / seconds / 1e9, 3),
        "device_pool_peak_bytes": peak,
        "memory_budget": plan.options.memory_budget,
    }
    if stages is not None:
        out["stages_seconds"] = {k: round(v, 4) for k, v in stages.seconds.items()}
    return out


def pinned(xp: Any, array: np.ndarray) -> np.ndarray:
    """The volume in pinned host memory under CuPy (copies to the device at full speed)."""
    if xp is np:
        return array
    import cupyx

    held = cupyx.empty_pinned(array.shape, array.dtype)
    held[...] = array
    return held


def steps(name: str) -> Any:
    """Prints each finished step of a case with its seconds, so that a run stopped by its time
    limit shows where it was."""
    last = [time.perf_counter()]

    def step(what: str) -> None:
        now = time.perf_counter()
        print(f"  {name}: {what} ({now - last[0]:.1f} s)", flush=True)
        last[0] = now

    return step


def task_stream(xp: Any) -> AbstractContextManager[None]:
    """A shard task's device work on its thread's own stream, as a GPU worker runs it."""
    if xp is np:
        return nullcontext()
    from shardwright.engine.gpu import own_stream

    return own_stream(xp)


def end_to_end(
    case: dict[str, Any], npy: pathlib.Path, dest: pathlib.Path, engine: str, client: Any = None
) -> float:
    """Seconds of one whole conversion: cluster start included, unless on `client`'s."""
    if dest.exists():
        shutil.rmtree(dest)
    started = time.perf_counter()
    api.convert(
        str(npy),
        str(dest),
        chunk_size=CHUNK,
        engine=engine,
        progress=False,
        client=client,
        **case["options"],
    )
    return time.perf_counter() - started


def gpu_task_threads(case: dict[str, Any], npy: pathlib.Path, dest: pathlib.Path) -> dict:
    """The GPU engine's job on a dask-cuda cluster started beforehand with 1, 2 and 4 shard
    task threads per GPU: seconds of the job alone."""
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    seconds = {}
    for threads in (1, 2, 4):
        with (
            LocalCUDACluster(
                host="127.0.0.1",
                threads_per_worker=threads,
                resources={GPU_RESOURCE: threads},
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            seconds[str(threads)] = round(end_to_end(case, npy, dest, "gpu", client), 3)
    return {"job_seconds_by_task_threads": seconds}


def parity(name: str, array: np.ndarray, gpu_dest: pathlib.Path, cpu_dest: pathlib.Path) -> dict:
    """The GPU output read by TensorStore equals the source; raw shards equal the CPU engine's
    bytes (compressed_segmentation's are gzip-compressed, by nvCOMP on the GPU engine)."""
    zarr3 = CASES[name]["options"].get("format") == "zarr3"
    driver = "zarr3" if zarr3 else "neuroglancer_precomputed"
    where = f"{gpu_dest}/0" if zarr3 else str(gpu_dest)  # zarr3: an OME-Zarr group over 0/
    spec: dict[str, Any] = {"driver": driver, "kvstore": f"file://{where}/"}
    read = np.asarray(ts.open(spec).result().read().result())
    read = read.squeeze() if zarr3 else read[..., 0].transpose(2, 1, 0)
    out = {"tensorstore_reads_source": bool(np.array_equal(read, array))}
    if name == "raw":  # the others' gzip and zstd are nvCOMP's bytes on the GPU engine
        shards = sorted(p.relative_to(gpu_dest) for p in gpu_dest.rglob("*.shard"))
        out["shards_byte_identical"] = bool(shards) and all(
            (gpu_dest / p).read_bytes() == (cpu_dest / p).read_bytes() for p in shards
        )
    return out


def gpu_device(xp: Any) -> dict[str, Any]:
    if xp is np:
        return {"name": "cpu (NumPy twin)"}
    props = xp.cuda.runtime.getDeviceProperties(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "name": props["name"].decode(),
        "nvidia_smi": smi.stdout.strip(),
        "cuda_runtime": xp.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": xp.cuda.runtime.driverGetVersion(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xp", choices=["cupy", "numpy"], default="cupy")
    parser.add_argument("--gib", type=float, default=4.0, help="volume size per case")
    parser.add_argument("--quick", action="store_true", help="64 MiB volumes, a smoke run")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument(
        "--concurrency", default="2,4", help="shard tasks at once on the device path, e.g. 2,4,8"
    )
    parser.add_argument(
        "--device-only",
        action="store_true",
        help="the device paths alone (byte codecs by nvCOMP only): no end-to-end job",
    )
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args()
    if args.xp == "cupy":
        import cupy as xp
    else:
        xp = np
    nbytes = int((1 / 16 if args.quick else args.gib) * GiB)
    concurrency = [int(n) for n in args.concurrency.split(",") if n]
    device = gpu_device(xp)  # each finished case is written at once: a stopped run keeps it
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        work = pathlib.Path(tmp)
        for name in args.cases.split(","):
            try:
                figures[name] = measure(
                    name, nbytes, xp, work, concurrency, device_only=args.device_only
                )
            except Exception as exc:  # one failed case is a result; the others still run
                figures[name] = {"error": "".join(traceback.format_exception(exc))[-4000:]}
            print(name, json.dumps(figures[name]), flush=True)
            path = write_result("gpu", figures, PACKAGES, device=device, directory=args.out)
            shutil.rmtree(work / "cpu", ignore_errors=True)
            shutil.rmtree(work / "gpu", ignore_errors=True)
    print(
        f"\n{'case':<24}{'device GB/s':>12}{'nvCOMP':>8}{'x2':>7}{'x4':>7}{'target':>8}"
        f"{'cpu s':>8}{'gpu s':>8}"
    )
    for name, row in figures.items():
        if "error" in row:
            print(f"{name:<24}FAILED: {row['error'].strip().splitlines()[-1]}")
            continue
        dp, e2e = row["device_path"], row.get("end_to_end", {})
        nv = row.get("device_path_nvcomp", {})
        x2, x4 = (
            row["device_path_concurrent"].get(k, {}).get("input_GBps", "-") for k in ("2", "4")
        )
        print(
            f"{name:<24}{dp['input_GBps']:>12}{nv.get('input_GBps', '-'):>8}{x2:>7}{x4:>7}"
            f"{dp['target_GBps']:>8}{e2e.get('cpu_engine_seconds', '-'):>8}"
            f"{e2e.get('gpu_engine_seconds', '-'):>8}  {row.get('parity', '')}"
        )
    print(f"device: {device}; versions: {versions(*PACKAGES)}\nwritten {path}")


def measure(
    name: str,
    nbytes: int,
    xp: Any,
    work: pathlib.Path,
    concurrency: list[int],
    *,
    device_only: bool = False,
) -> dict[str, Any]:
    """One case: the device path (and nvCOMP's for byte codecs), both engines end to end, and
    parity (under NumPy, the CPU output read back by TensorStore: the check itself checked).
    `device_only`: the device paths alone, byte codecs by nvCOMP only (the GPU engine's
    default), each at `concurrency` tasks at once too."""
    case = CASES[name]
    step = steps(name)
    array = volume(case["kind"], nbytes)
    npy = work / f"{case['kind']}.npy"
    if not npy.exists() and not device_only:
        np.save(npy, array)
    held = pinned(xp, array)  # once per case: pinning gigabytes takes seconds
    step("volume made, saved and pinned")
    on_device = xp is not np and name in ("gzip", "zstd", "compressed_segmentation")
    row: dict[str, Any] = {
        "device_path": device_path(case, held, xp, work, nvcomp=on_device and device_only)
    }
    step("device path")
    row["device_path"]["target_GBps"] = TARGETS[name]
    row["device_path"]["meets_target"] = row["device_path"]["input_GBps"] >= TARGETS[name]
    if on_device and not device_only:
        try:
            nv = device_path(case, held, xp, work, nvcomp=True)
            nv["meets_target"] = nv["input_GBps"] >= TARGETS[name]
        except Exception as exc:  # a failed device codec is a result to report
            nv = {"error": "".join(traceback.format_exception(exc))[-4000:]}
        row["device_path_nvcomp"] = nv
    concurrent = row["device_path_concurrent"] = {}
    for tasks in concurrency:
        try:
            together = device_path(case, held, xp, work, nvcomp=on_device, concurrency=tasks)
            together["meets_target"] = together["input_GBps"] >= TARGETS[name]
        except Exception as exc:
            together = {"error": "".join(traceback.format_exception(exc))[-4000:]}
        concurrent[str(tasks)] = together
    del held
    step("device paths, concurrent")
    if device_only:
        return row
    cpu_seconds = end_to_end(case, npy, work / "cpu", "cpu")
    step("cpu engine end to end")
    row["end_to_end"] = {"cpu_engine_seconds": round(cpu_seconds, 3)}
    if xp is np:
        row["parity"] = parity(name, array, work / "cpu", work / "cpu")
        return row
    gpu_seconds = end_to_end(case, npy, work / "gpu", "gpu")
    step("gpu engine end to end")
    row["end_to_end"] |= {
        "gpu_engine_seconds": round(gpu_seconds, 3),
        "gpu_GBps": round(array.nbytes / gpu_seconds / 1e9, 3),
        "cpu_GBps": round(array.nbytes / cpu_seconds / 1e9, 3),
        "cpu_over_gpu": round(cpu_seconds / gpu_seconds, 2),
    }
    row["parity"] = parity(name, array, work / "gpu", work / "cpu")
    step("parity")
    try:
        row["end_to_end"] |= gpu_task_threads(case, npy, work / "gpu")
    except Exception as exc:
        row["end_to_end"]["task_threads_error"] = "".join(traceback.format_exception(exc))[-4000:]
    return row


if __name__ == "__main__":
    main()
