"""The GPU engine against the CPU engine in steady state: whole jobs of tens of GiB.

At 2 GiB a GPU job is mostly its cluster's start; the issue's bar is the steady state (32 GiB).
Per case (`bench_gpu.CASES`: precomputed raw, gzip, compressed_segmentation; zarr3 zstd), on
one volume saved as .npy (in the page cache, as a warm source is):
- **floor**: the volume read and crc32c'd by every core at once, the least any engine does
  with each byte (`read_crc_floor_GBps`);
- **CPU engine**: `shardwright.convert` on a local cluster of one single-threaded worker
  process per core, started beforehand (its start timed apart);
- **GPU engine**: the same job on a dask-cuda cluster of one worker per GPU running 2, 4, 8 ...
  shard tasks at once (`--task-threads`), each started beforehand;
- the destination is `discard://` (`synthetic.py`): metadata, receipts and the manifest are
  written as usual, shard bodies are counted and dropped, so the disk (64 GiB on the GPU
  machines) neither fills nor sets the pace; parity is `bench_gpu.py`'s business.

Each finished case is written at once; `--deadline-s` stops starting new jobs after that many
seconds, so a time-limited run returns what it measured.

    python benchmarks/bench_gpu_steady.py --gib 32 --out DIR     # on a GPU machine
    python benchmarks/bench_gpu_steady.py --quick --cpu-only     # the script's smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
# Worker processes find (and preload) `synthetic`, which registers discard://.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
import synthetic  # noqa: E402,F401  (registers discard:// here too)
from _common import RESULTS, write_result  # noqa: E402
from bench_gpu import CASES, CHUNK, PACKAGES, GiB, device_path, gpu_device, tile_block, volume_shape  # noqa: E402

from shardwright import api  # noqa: E402
from shardwright.jobs.workers import GPU_RESOURCE  # noqa: E402
from shardwright.sources import open_source  # noqa: E402


def write_volume(kind: str, nbytes: int, path: pathlib.Path) -> np.ndarray:
    """`bench_gpu.volume`'s voxels written slab by slab into a .npy (never twice in memory)."""
    dtype, side, tile = volume_shape(kind, nbytes)
    block = tile_block(kind, tile)
    reps = -(-side // tile)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(side,) * 3)
    for z0 in range(0, side, tile):
        depth = min(tile, side - z0)
        out[z0 : z0 + depth] = np.tile(block[:depth], (1, reps, reps))[:, :side, :side]
    out.flush()
    return np.load(path, mmap_mode="r")


def read_crc_floor(array: np.ndarray, threads: int) -> float:
    """GB/s of reading the volume and checksumming it on `threads` threads at once."""
    slabs = np.array_split(np.arange(array.shape[0]), threads * 4)
    flat = [array[s[0] : s[-1] + 1] for s in slabs if len(s)]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda a: crc32c.crc32c(memoryview(np.ascontiguousarray(a))), flat))
    return array.nbytes / (time.perf_counter() - started) / 1e9


def npy_device_path(
    name: str,
    npy: pathlib.Path,
    array: np.ndarray,
    work: pathlib.Path,
    threads: list[int],
    gpu: bool,
) -> dict[str, Any]:
    """`bench_gpu.device_path` reading the .npy as a job does (no cluster, no store): one task
    with each stage timed, then as many at once as each GPU worker runs. Against the device
    path from pinned memory and the job on its cluster, it says which one costs the time.
    Without `gpu`, on the NumPy twin (the smoke test's)."""
    xp: Any = np
    if gpu:
        import cupy as xp
    on_device = gpu and name in ("gzip", "zstd", "compressed_segmentation")
    return {
        str(n): device_path(CASES[name], array, xp, work, on_device, n, open_source(str(npy)))
        for n in [1, *threads]
    }


def timed_job(
    case: dict[str, Any], npy: pathlib.Path, dest: str, engine: str, client: Any
) -> float:
    started = time.perf_counter()
    api.convert(
        str(npy), dest, chunk_size=CHUNK, engine=engine, progress=False, client=client,
        **case["options"],
    )  # fmt: skip
    return time.perf_counter() - started


def cpu_cluster(cpus: int) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=cpus, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
        preload=["synthetic"],
    )  # fmt: skip


def gpu_cluster(threads: int) -> Any:
    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster(
        host="127.0.0.1", threads_per_worker=threads, resources={GPU_RESOURCE: threads},
        dashboard_address=None, preload=["synthetic"],
    )  # fmt: skip


def on_cluster(make: Any, run: Any) -> tuple[float, float]:
    """(seconds to start the cluster, seconds of `run(client)` on it)."""
    from distributed import Client

    started = time.perf_counter()
    with make() as cluster, Client(cluster) as client:
        client.wait_for_workers(len(cluster.workers))
        start = time.perf_counter() - started
        return start, run(client)


def measure(
    name: str, npy: pathlib.Path, work: pathlib.Path, threads: list[int], gpu: bool, ends: float
) -> dict[str, Any]:
    case = CASES[name]
    array = np.load(npy, mmap_mode="r")
    cpus = os.cpu_count() or 1
    row: dict[str, Any] = {
        "input_bytes": int(array.nbytes),
        "shape": list(array.shape),
        "read_crc_floor_GBps": round(read_crc_floor(array, cpus), 3),
    }
    print(f"  {name}: floor {row['read_crc_floor_GBps']} GB/s", flush=True)
    row["device_path_from_npy"] = npy_device_path(name, npy, array, work, threads, gpu)
    print(f"  {name}: device path from the .npy {row['device_path_from_npy']}", flush=True)

    def job(engine: str, label: str) -> Any:
        return lambda client: timed_job(case, npy, f"discard://{work}/{label}", engine, client)

    start, seconds = on_cluster(lambda: cpu_cluster(cpus), job("cpu", f"{name}-cpu"))
    row["cpu_engine"] = {"cluster_start_s": round(start, 2), "job_s": round(seconds, 3),
                         "GBps": round(array.nbytes / seconds / 1e9, 3)}  # fmt: skip
    print(f"  {name}: cpu engine {row['cpu_engine']}", flush=True)
    if not gpu:
        return row
    row["gpu_engine"] = {}
    for n in threads:
        if time.monotonic() > ends:
            row["gpu_engine"][str(n)] = "not run: past the deadline"
            continue
        start, seconds = on_cluster(lambda n=n: gpu_cluster(n), job("gpu", f"{name}-gpu{n}"))
        row["gpu_engine"][str(n)] = {
            "cluster_start_s": round(start, 2), "job_s": round(seconds, 3),
            "GBps": round(array.nbytes / seconds / 1e9, 3),
            "gpu_over_cpu": round(row["cpu_engine"]["job_s"] / seconds, 2),
        }  # fmt: skip
        print(f"  {name}: gpu engine, {n} task threads {row['gpu_engine'][str(n)]}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=32.0, help="volume size per case")
    parser.add_argument("--quick", action="store_true", help="256 MiB volumes, a smoke run")
    parser.add_argument("--cases", default="gzip,zstd,raw,compressed_segmentation")
    parser.add_argument("--task-threads", default="2,4,8", help="GPU worker threads to try")
    parser.add_argument("--cpu-only", action="store_true", help="no GPU engine (smoke test)")
    parser.add_argument("--deadline-s", type=float, default=1e9, help="start nothing after")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--work", type=pathlib.Path, default=None, help="where the .npy goes")
    args = parser.parse_args()
    ends = time.monotonic() + args.deadline_s
    nbytes = int((1 / 4 if args.quick else args.gib) * GiB)
    threads = [int(n) for n in args.task_threads.split(",") if n]
    if args.cpu_only:
        device: Any = {"name": "cpu only"}
    else:
        import cupy

        device = gpu_device(cupy)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-steady-", dir=args.work) as tmp:
        work = pathlib.Path(tmp)
        made: tuple[str, pathlib.Path] | None = None
        for name in args.cases.split(","):
            if time.monotonic() > ends:
                figures[name] = {"error": "not run: past the deadline"}
                continue
            kind = CASES[name]["kind"]
            if made is None or made[0] != kind:
                if made is not None:
                    made[1].unlink()  # one volume on disk at a time
                started = time.perf_counter()
                made = (kind, work / f"{kind}.npy")
                write_volume(kind, nbytes, made[1])
                print(f"{kind} volume written ({time.perf_counter() - started:.1f} s)", flush=True)
            try:
                figures[name] = measure(name, made[1], work, threads, not args.cpu_only, ends)
            except Exception as exc:  # one failed case is a result; the others still run
                figures[name] = {"error": f"{type(exc).__name__}: {exc}"[-4000:]}
            print(name, json.dumps(figures[name]), flush=True)
            write_result("gpu-steady", figures, PACKAGES, device=device, directory=args.out)


if __name__ == "__main__":
    main()
