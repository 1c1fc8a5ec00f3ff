"""Meshes, skeletons and levels added in place to datasets that exist: shardwright vs Igneous.

Two cases (`--case segmentation|image|both`, default both), each tool on a fresh copy of the
same dataset (`WORK/in_place_CASE_TOOL/layer`, not timed), writing into that copy:

- **segmentation**: bench_meshes.py's deterministic neuron-like uint64 segmentation (default
  512 x 512 x 256 voxels at 8 x 8 x 40 nm, `--shape`, ~1,000 segments; CloudVolume-written,
  unsharded, 64^3 chunks, compressed_segmentation + gzip) under `WORK/src`, made sharded by
  Igneous (`create_image_shard_transfer_tasks` with its defaults, run by LocalTaskQueue in
  Igneous's environment) under `WORK/src_sharded`: the dataset both tools add to
  (`--unsharded-source`: the unsharded one).
  **shardwright**: one job, `python -m shardwright.cli convert COPY --generate-meshes
  --generate-skeletons --mips 2 --factor 2,2,1` (plus `--shardwright-args`, e.g.
  `--mesh-block`). **Igneous**: forge (sharded) and merge-sharded of meshes and of skeletons
  with its command line's defaults, run exactly as bench_meshes.py runs them (task creation
  into a FileQueue, `igneous -p CORES execute -x`), then its sharded downsampling into the
  same layer (`create_image_shard_downsample_tasks`, as `igneous image downsample --sharded
  --num-mips 2` makes them: factor 2,2,1, `--memory` 3.5e9, method auto), run the same way;
  all in one worker process in Igneous's environment.
- **image**: a deterministic EM-like uint8 image (default 1024^3 voxels at 8 x 8 x 40 nm,
  `--image-shape`, 1 GiB; membranes as the zero set of a smooth random field, texture, noise;
  raw, uncompressed, 64^3 chunks), written by CloudVolume in slabs of one chunk's depth under
  `WORK/image_src`. **shardwright**: `convert COPY --mips 2 --factor 2,2,1`; **Igneous**: its
  sharded downsampling alone, as above.

`--mips` and `--factor` change the levels of both cases and both tools (Igneous's sharded
downsampling takes 2,2,1 and 2,2,2 only). Each run is measured as bench_meshes.py's
`run_measured` does (wall time end to end, user + system CPU seconds of the waited-for tree,
peak of the summed RSS and PSS of its processes sampled every 0.1 s) and, here, what it read
of the dataset's base scale (the only scale: the one meshed and the one the levels start from):

- **opened**: every open of a file of the scale, seen by fanotify (FAN_OPEN on the scale's
  folder, per thread; needs root) while the tool runs. Both tools read a chunk file whole
  each time they open it, so the opens times the files' sizes are the bytes read through the
  filesystem, page-cache hits included, i.e. the GETs a bucket would have served; over the
  scale's stored bytes this is `read_over_stored`. The kernel merges a thread's second open of
  a file into the first while that event is still unread, so this is a lower bound (the
  events are read as they come).
- **read syscalls** (a sharded scale, whose files are read by ranges, not whole): each tool
  is run once more, untimed, on a fresh copy under `strace -f --seccomp-bpf -P SHARD ...`,
  and the bytes that its read-family system calls on the scale's files returned are summed:
  the ranged GETs a bucket would have served (`read_over_stored`).
- **fetched from disk**: the scale's pages are dropped from the page cache before the run
  (`sync`, `posix_fadvise(DONTNEED)`), and the bytes of them resident afterwards (`fincore`)
  are the distinct bytes the run made the kernel read (readahead included, whole pages). The
  tree's `block_read_bytes` (read_bytes of /proc/PID/io, summed by getrusage) also counts
  any other file it read that was not in the page cache.

Afterwards every file the copy had (its chunks, `provenance`, ...) is compared with crc32c to
what it was before; `kept_originals` says whether all but `info` are byte-identical, and the
record lists what changed in `info` and every top-level entry the tool added (files, bytes).
Quality of the segmentation's meshes and skeletons is bench_meshes.py's (LOD 0 area over
zmesh's unsimplified mesh of the whole volume, cable over kimimaro's on the whole volume),
read back from each copy with CloudVolume. Each added level is read back from each copy with
TensorStore, slab by slab, and compared with: tinybrain's reduction of the level below as that
copy holds it (`downsample_segmentation` for the segmentation, mode; `downsample_with_averaging`
for the image; num_mips=1 on the level below, as tests/e2e/test_in_place.py does); tinybrain's
levels made in one call from the base (num_mips=N, what Igneous's task computes); the same
level of the other tool's copy; and, on `--reference-boxes` boxes, the levels that
tests/support/downsampling_reference.py's `reference` makes from the base, level by level.
Each comparison counts the voxels that differ and, for the image, how many by how much
(`got_minus_want`).

Igneous runs in its own environment (see bench_meshes.py's docstring):

    .venv/bin/python benchmarks/bench_in_place.py --igneous-python /work/igneous-venv/bin/python
    .venv/bin/python benchmarks/bench_in_place.py --shape 256,256,64 --image-shape 256,256,128 \\
        --work /tmp/bip --igneous-python /work/igneous-venv/bin/python    # quick try
    .venv/bin/python benchmarks/bench_in_place.py --case image --skip-igneous --work /tmp/bip
    .venv/bin/python benchmarks/bench_in_place.py --case segmentation --wait-for-load 0.8 ...

(`--wait-for-load L`: before each tool's run, wait until the 1-minute load is below L, polling
every 30 s, at most `--wait-most` seconds; each wait is recorded.) The JSON goes to
`results/in_place-DATE-CASE.json` (`--out` elsewhere), with the machine, per case the load
before and after, the tree measured (HEAD and what is uncommitted in src/),
`igneous_over_shardwright_time` (the issue's goal: at least 3) and shardwright's base-scale
`read_over_stored` (goal: at most 1.1).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import datetime
import hashlib
import json
import os
import pathlib
import re
import resource
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import bench_meshes as bm  # noqa: E402
from _common import RESULTS, machine, versions  # noqa: E402

TOOLS = ("igneous", "shardwright")
OURS = ("mesh", "skeletons", ".shardwright")  # where shardwright writes beside `info`
PAGE = os.sysconf("SC_PAGE_SIZE")
# each case: what the tools make beside the levels, and the levels' reduction
CASES = {
    "segmentation": ((bm.MESHES, bm.SKELETONS), "mode"),
    "image": ((), "average"),
}
IMAGE_SHAPE = (1024, 1024, 1024)
# the goals: Igneous's wall time over ours, our bytes read of the base scale over
# its stored bytes
TIME_GOAL, READ_GOAL = 3.0, 1.1


# --------------------------------------------------------------------------- the copy's objects


def _crc32c(data: bytes) -> str:
    import crc32c

    return f"{crc32c.crc32c(data):08x}"


def fingerprint(layer: pathlib.Path) -> dict[str, list]:
    """Every file under `layer`: relative path -> [size, crc32c]."""
    return {
        str(p.relative_to(layer)): [p.stat().st_size, _crc32c(p.read_bytes())]
        for p in sorted(layer.rglob("*"))
        if p.is_file()
    }


def compare_objects(
    layer: pathlib.Path, before: dict[str, list], info_before: dict[str, Any]
) -> dict[str, Any]:
    """What a tool did to the objects the copy had, and what it added beside them."""
    changed, removed = [], []
    for name, (size, crc) in before.items():
        path = layer / name
        if not path.is_file():
            removed.append(name)
        elif path.stat().st_size != size or _crc32c(path.read_bytes()) != crc:
            changed.append(name)
    added: dict[str, dict[str, int]] = {}
    for path in sorted(layer.rglob("*")):
        name = str(path.relative_to(layer))
        if path.is_file() and name not in before:
            top = added.setdefault(name.split("/")[0], {"files": 0, "bytes": 0})
            top["files"] += 1
            top["bytes"] += path.stat().st_size
    info = json.loads((layer / "info").read_text())
    named = {info[k] for k in ("mesh", "skeletons") if isinstance(info.get(k), str)}
    old = {s["key"] for s in info_before["scales"]}
    levels = [s["key"] for s in info["scales"] if s["key"] not in old]
    named |= set(levels)
    return {
        "original_files": len(before),
        "kept_originals": not removed and changed in ([], ["info"]),
        "changed": changed,
        "removed": removed,
        "info_keys_added": sorted(set(info) - set(info_before)),
        "info_keys_changed": sorted(k for k in info_before if info.get(k) != info_before[k]),
        "added": added,
        "levels_added": {key: added.get(key) for key in levels},
        # beside the directories the new info names, levels included (and shardwright's
        # own .shardwright/)
        "added_elsewhere": {k: v for k, v in added.items() if k not in named | {OURS[2]}},
    }


# --------------------------------------------------------------------------- the image


def _waves(
    rng: np.random.Generator, count: int, wavelengths: tuple[float, float], xy: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` plane waves of random direction and phase: their cos and sin over the plane
    (`xy`: the plane's positions in nm, [n, 2]) as one [n, 2 count] matrix, and the wave
    numbers and phases along z, so that a wave at z is that matrix times (cos, -sin) of
    (kz z + phase): every plane of a slab is one matrix product."""
    direction = rng.normal(size=(count, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    k = direction * (2 * np.pi / rng.uniform(*wavelengths, size=(count, 1)))
    across = xy @ k[:, :2].T
    plane = np.concatenate([np.cos(across), np.sin(across)], axis=1).astype(np.float32)
    return plane, k[:, 2], rng.uniform(0, 2 * np.pi, size=count)


def image_planes(
    shape: tuple[int, int, int],
    resolution: tuple[float, float, float],
    seed: int,
    start: int,
    stop: int,
) -> np.ndarray:
    """Planes `start` to `stop` of a deterministic EM-like uint8 image [x, y, z] (the same for
    a seed whatever the slabs): bright cytoplasm, dark membranes ~20 nm thick where a smooth
    random field of 0.5-1.5 um waves crosses zero, a finer texture and per-plane noise;
    computed 16 planes at a time (~0.4 GiB of float32 at 1024^2)."""
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(
        np.arange(shape[0]) * resolution[0], np.arange(shape[1]) * resolution[1], indexing="ij"
    )
    xy = np.stack([x.ravel(), y.ravel()], axis=1)
    del x, y
    waves = [_waves(rng, 6, (500.0, 1500.0), xy), _waves(rng, 4, (150.0, 400.0), xy)]
    out = np.empty((shape[0], shape[1], stop - start), dtype=np.uint8)
    for first in range(start, stop, 16):
        z = np.arange(first, min(first + 16, stop))
        fields = []
        for plane, kz, phase in waves:  # each a sum of waves, of variance 1
            angle = np.outer(kz, z * resolution[2]) + phase[:, None]
            along = np.concatenate([np.cos(angle), -np.sin(angle)]).astype(np.float32)
            field = (plane @ along).reshape(shape[0], shape[1], len(z))
            fields.append(field / np.float32(np.sqrt(len(kz) / 2)))
        cells, texture = fields
        value = 170.0 - 110.0 * np.exp(-np.square(cells / 0.08)) + 12.0 * texture
        for i, plane in enumerate(z):
            value[:, :, i] += 10.0 * np.random.default_rng([seed, plane]).standard_normal(
                shape[:2], dtype=np.float32
            )
        out[:, :, first - start : first - start + len(z)] = np.clip(np.rint(value), 0, 255)
    return out


def image_volume(args: argparse.Namespace, work: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """Write the image under `work/image_src` in slabs of one chunk's depth (or reuse the one
    the same parameters wrote)."""
    from cloudvolume import CloudVolume

    folder, stamp_path = work / "image_src", work / "image_src.json"
    wanted = {
        "shape": list(args.image_shape),
        "resolution": list(args.resolution),
        "seed": args.seed,
        "chunk_size": list(args.chunk),
        "encoding": "raw",
        "compress": None,
        "generator": "EM-like: membranes at a smooth field's zero set, texture, noise (v1)",
    }
    stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
    if (folder / "info").exists() and {k: stamp.get(k) for k in wanted} == wanted:
        print(f"reusing {folder}", file=sys.stderr)
        return folder, stamp
    if folder.exists():
        shutil.rmtree(folder)
    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="image", data_type="uint8", encoding="raw",
        resolution=args.resolution, voxel_offset=(0, 0, 0), chunk_size=args.chunk,
        volume_size=args.image_shape,
    )  # fmt: skip
    volume = CloudVolume(f"file://{folder}", info=info, compress=False, progress=False)
    volume.commit_info()
    started = time.perf_counter()
    digest, total, squares = hashlib.sha256(), 0.0, 0.0
    for start in range(0, args.image_shape[2], args.chunk[2]):
        stop = min(start + args.chunk[2], args.image_shape[2])
        slab = image_planes(args.image_shape, args.resolution, args.seed, start, stop)
        volume[:, :, start:stop] = slab
        digest.update(np.ascontiguousarray(slab.transpose(2, 1, 0)).tobytes())  # z, y, x
        total += float(slab.sum(dtype=np.float64))
        squares += float(np.square(slab, dtype=np.float64).sum())
    voxels = float(np.prod(args.image_shape))
    stamp = dict(wanted)
    stamp.update(
        voxels_sha256=digest.hexdigest(),  # z slowest, x fastest
        mean=round(total / voxels, 3),
        std=round((squares / voxels - (total / voxels) ** 2) ** 0.5, 3),
        source_bytes=bm.tree_bytes(folder),
        seconds_to_make=round(time.perf_counter() - started, 1),
    )
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
    print(f"wrote {folder} in {stamp['seconds_to_make']:.0f} s", file=sys.stderr)
    return folder, stamp


# --------------------------------------------------------------------------- reads of the scale


def sharded_source(
    args: argparse.Namespace, work: pathlib.Path, source: pathlib.Path, stamp: dict[str, Any]
) -> tuple[pathlib.Path, dict[str, Any]]:
    """The segmentation made sharded by Igneous under `work/src_sharded` (or the one made
    from the same source before); its stamp: the source's and how it was sharded."""
    folder, stamp_path = work / "src_sharded", work / "src_sharded.json"
    wanted = {**stamp, "sharded_by": "igneous.task_creation.create_image_shard_transfer_tasks"}
    made = stamp_path.exists() and (folder / "info").exists()
    if made and json.loads(stamp_path.read_text()) == wanted:
        print(f"reusing {folder}", file=sys.stderr)
        return folder, wanted
    if folder.exists():
        shutil.rmtree(folder)
    if not args.igneous_python:
        raise SystemExit("a sharded source is made by Igneous: pass --igneous-python, or "
                         "--unsharded-source")  # fmt: skip
    command = [args.igneous_python, str(HERE), "igneous-shard", str(source), str(folder)]
    subprocess.run(command, check=True)
    stamp_path.write_text(json.dumps(wanted, indent=2) + "\n")
    return folder, wanted


def igneous_shard(source: str, dest: str) -> None:
    """Runs in Igneous's environment: `dest` as Igneous's sharded transfer of `source` makes
    it (its defaults), its tasks run here one by one."""
    import igneous.task_creation as tc
    from taskqueue import LocalTaskQueue

    tasks = tc.create_image_shard_transfer_tasks(
        f"file://{pathlib.Path(source).resolve()}", f"file://{pathlib.Path(dest).resolve()}"
    )
    LocalTaskQueue(parallel=1, progress=False).insert_all(tasks)


def strace_reads(
    run: Any, files: list[pathlib.Path], log: pathlib.Path, stored: int
) -> dict[str, Any]:
    """The bytes read-family system calls on `files` returned while `run()` ran its tool under
    strace (through bench_meshes.COMMAND_PREFIX)."""
    bm.COMMAND_PREFIX[:] = [
        "strace", "-f", "-qq", "--seccomp-bpf", "-s", "0", "-o", str(log),
        "-e", "trace=read,pread64,readv,preadv,preadv2", "-e", "signal=none",
        *(arg for path in files for arg in ("-P", str(path))),
    ]  # fmt: skip
    try:
        record = run()
    finally:
        bm.COMMAND_PREFIX.clear()
    total = calls = 0
    pattern = re.compile(r"(?:\b(?:read|pread64|readv|preadv2?)\(|resumed>).*\)\s+=\s+(\d+)")
    for line in log.read_text(errors="replace").splitlines():
        found = pattern.search(line)
        if found:
            total += int(found.group(1))
            calls += 1
    return {
        "bytes": total,
        "calls": calls,
        "read_over_stored": round(total / stored, 3) if stored else None,
        "returncode": record.get("returncode"),
    }


def drop_cached(files: list[pathlib.Path]) -> None:
    """Write back what is dirty, then drop the files' pages from the page cache."""
    os.sync()
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(files: list[pathlib.Path]) -> int | None:
    """Bytes of the files' pages in the page cache (util-linux `fincore`), None without it."""
    if not shutil.which("fincore"):
        return None
    total = 0
    for start in range(0, len(files), 512):
        out = subprocess.run(
            ["fincore", "--json", "--bytes", *map(str, files[start : start + 512])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        total += sum(int(row["res"]) for row in json.loads(out)["fincore"])
    return total


class ScaleOpens:
    """Opens of the files directly in `folder`, by any process, counted through fanotify
    while the context is open; `result()` weighs them by the files' sizes."""

    FAN_CLOEXEC, FAN_NONBLOCK, FAN_REPORT_TID = 0x1, 0x2, 0x100
    FAN_MARK_ADD, FAN_OPEN, FAN_EVENT_ON_CHILD, FAN_Q_OVERFLOW = 0x1, 0x20, 0x08000000, 0x4000
    EVENT = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata

    def __init__(self, folder: pathlib.Path, sizes: dict[str, int]) -> None:
        self.folder, self.sizes = folder, sizes
        self.opens: collections.Counter[str] = collections.Counter()
        self.threads: set[int] = set()
        self.overflow = False
        self.error: str | None = None
        self.fd = -1

    def __enter__(self) -> ScaleOpens:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        libc.fanotify_mark.argtypes = [
            ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p,
        ]  # fmt: skip
        flags = self.FAN_CLOEXEC | self.FAN_NONBLOCK | self.FAN_REPORT_TID
        self.fd = libc.fanotify_init(flags, os.O_RDONLY | os.O_LARGEFILE)
        if self.fd < 0 or libc.fanotify_mark(
            self.fd,
            self.FAN_MARK_ADD,
            self.FAN_OPEN | self.FAN_EVENT_ON_CHILD,
            -100,  # AT_FDCWD
            os.fsencode(self.folder),
        ):
            self.error = f"fanotify: {os.strerror(ctypes.get_errno())}"
            return self
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _drain(self) -> None:
        while True:
            try:
                buffer = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(buffer):
                length, _, _, _, mask, fd, tid = self.EVENT.unpack_from(buffer, offset)
                offset += length
                self.overflow |= bool(mask & self.FAN_Q_OVERFLOW)
                if fd < 0:
                    continue
                try:
                    self.opens[os.readlink(f"/proc/self/fd/{fd}")] += 1
                finally:
                    os.close(fd)
                self.threads.add(tid)

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = poller.poll()
            self._drain()
            if any(fd == self._stop_r for fd, _ in ready):
                return

    def __exit__(self, *exc: object) -> None:
        if self.error is None:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._drain()  # the opens of a process are queued before it exits
            for fd in (self._stop_r, self._stop_w):
                os.close(fd)
        if self.fd >= 0:
            os.close(self.fd)

    def result(self, stored: int) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        ours = {p: n for p, n in self.opens.items() if p in self.sizes}
        read = sum(n * self.sizes[p] for p, n in ours.items())
        return {
            "opens": sum(ours.values()),
            "files_opened": len(ours),
            "files_never_opened": len(self.sizes) - len(ours),
            "opens_per_file": {
                str(k): v for k, v in sorted(collections.Counter(ours.values()).items())
            },
            "bytes": read,
            "read_over_stored": round(read / stored, 3) if stored else None,
            "other_opens_in_folder": sum(n for p, n in self.opens.items() if p not in self.sizes),
            "threads": len(self.threads),
            "queue_overflow": self.overflow,
        }


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting for I/O)."""
    import psutil

    t = psutil.cpu_times()  # guest time is already in user on Linux; steal is not ours
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def _cpu_seconds() -> float:
    """User + system seconds of this process and of its children waited for so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


# --------------------------------------------------------------------------- one tool


def downsample_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """`igneous image downsample PATH --sharded --num-mips N` (factor 2,2,1; `--volumetric`:
    2,2,2): its command line's defaults, as `create_image_shard_downsample_tasks` takes them."""
    return {
        "mip": 0,
        "num_mips": args.mips,
        "factor": list(args.factor),
        "fill_missing": False,
        "sparse": False,
        "chunk_size": None,
        "encoding": None,  # "auto": the scale's
        "memory_target": int(3.5e9),
        "method": "auto",  # mode for a segmentation, average for an image
        "encoding_level": None,
        "encoding_effort": 3,
        "codec_threads": 1,
    }


def igneous_parameters(args: argparse.Namespace, outputs: tuple[str, ...]) -> dict[str, Any]:
    """bench_meshes.py's forge and merge of `outputs` (none: only its `execute`), then the
    sharded downsampling."""
    params = bm.igneous_parameters(args, outputs)
    if not outputs:
        params = {"outputs": [], "execute": params["execute"]}
    params["downsample"] = downsample_parameters(args)
    return params


def igneous_worker(argv: list[str]) -> None:
    """Runs in Igneous's environment (bench_meshes.py's worker options): bench_meshes.py's
    forge and merge of the parameters' outputs, if any, then Igneous's sharded downsampling
    into the same layer, enqueued and executed the same way."""
    import igneous.task_creation as tc
    from igneous.types import DownsampleMethods
    from taskqueue import TaskQueue

    started = time.perf_counter()
    options = dict(zip(argv[::2], argv[1::2], strict=True))
    params = json.loads(options["--params"])
    report_path = pathlib.Path(options["--report"])
    queue = pathlib.Path(options["--queue"]).resolve()
    if params["outputs"]:
        bm.igneous_worker(argv)
        report = json.loads(report_path.read_text())
    else:
        report = {"versions": versions(*bm.PACKAGES), "phases": {}, "tasks": {}, "api": []}
    down = dict(params["downsample"])
    enqueued = time.perf_counter()
    tasks = list(tc.create_image_shard_downsample_tasks(
        f"file://{pathlib.Path(options['--layer']).resolve()}",
        **{k: down[k] for k in ("mip", "num_mips", "fill_missing", "sparse", "encoding",
                                "memory_target", "encoding_level", "encoding_effort",
                                "codec_threads")},
        chunk_size=down["chunk_size"] and tuple(down["chunk_size"]),
        factor=tuple(down["factor"]),
        method=DownsampleMethods[down["method"].upper()],
    ))  # fmt: skip
    report["tasks"]["downsample"] = len(tasks)
    TaskQueue(f"fq://{queue}").insert(tasks)
    phases = report["phases"]
    phases["downsample_enqueue"] = round(time.perf_counter() - enqueued, 2)
    phases["downsample_execute"] = round(bm._igneous_execute(queue, params["execute"]), 2)
    phases["total_in_worker"] = round(time.perf_counter() - started, 2)
    report["api"] += [
        "igneous.task_creation.create_image_shard_downsample_tasks",
        "taskqueue.TaskQueue('fq://...').insert",
        "igneous -p N execute -x",
    ]
    report_path.write_text(json.dumps(report, indent=2) + "\n")


def with_levels(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with `--mips N --factor X,Y,Z` after the shardwright options."""
    levels = f"--mips {args.mips} --factor {','.join(map(str, args.factor))}"
    return argparse.Namespace(
        **{**vars(args), "shardwright_args": f"{args.shardwright_args} {levels}"}
    )


def wait_for_load(args: argparse.Namespace) -> dict[str, Any] | None:
    """With --wait-for-load L: wait until the 1-minute load is below L (a poll every 30 s, at
    most --wait-most seconds); what it waited."""
    if args.wait_for_load is None:
        return None
    started = time.monotonic()
    while (load := os.getloadavg()[0]) >= args.wait_for_load:
        if time.monotonic() - started >= args.wait_most:
            break
        time.sleep(30)
    return {
        "below": args.wait_for_load,
        "waited_seconds": round(time.monotonic() - started),
        "load_1min": round(load, 2),
        "reached": load < args.wait_for_load,
    }


def run_tool(
    tool: str,
    case: str,
    args: argparse.Namespace,
    source: pathlib.Path,
    work: pathlib.Path,
    scale: str,
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """A fresh copy of `source`, `tool` run into it for `case`, measured; its record and the
    copy (None where the tool failed)."""
    outputs = CASES[case][0]
    folder = work / f"in_place_{case}_{tool}"
    if folder.exists():
        shutil.rmtree(folder)
    layer = folder / "layer"
    shutil.copytree(source, layer)
    before = fingerprint(layer)
    info_before = json.loads((layer / "info").read_text())
    files = sorted(p for p in (layer / scale).iterdir() if p.is_file())
    sizes = {os.path.realpath(p): p.stat().st_size for p in files}
    stored = sum(sizes.values())
    drop_cached(files)
    resident_before = resident_bytes(files)
    waited = wait_for_load(args)
    busy, own = machine_busy_seconds(), _cpu_seconds()
    with ScaleOpens((layer / scale).resolve(), sizes) as opens:
        record, out = _run_tool(tool, args, layer, folder, outputs)
        if tool == "shardwright":
            record["tree_changed_during_run"] = tree_state() != record["tree"]
    # the machine's busy CPU time during the run, less this process's (its sampling and event
    # threads) and its children's (the tool's tree, shardwright's bytecode compile before it):
    # what other work on the machine took meanwhile
    record["others_cpu_seconds"] = round(machine_busy_seconds() - busy - (_cpu_seconds() - own), 1)
    record["load_wait"] = waited
    resident_after = resident_bytes(files)
    paged = sum(-(-size // PAGE) * PAGE for size in sizes.values())
    record["scale_reads"] = {
        "opened": opens.result(stored),
        "fetched_from_disk": None
        if resident_after is None
        else {
            "resident_before": resident_before,
            "bytes": resident_after - resident_before,
            "over_stored_pages": round((resident_after - resident_before) / paged, 3),
        },
    }
    record["objects"] = compare_objects(layer, before, info_before)
    if any(p.suffix == ".shard" for p in files):  # read by ranges: count the bytes
        again = work / f"in_place_{case}_{tool}_reads"
        if again.exists():
            shutil.rmtree(again)
        shutil.copytree(source, again / "layer")
        shards = sorted((again / "layer" / scale).resolve().iterdir())
        record["scale_reads"]["read_syscalls"] = strace_reads(
            lambda: _run_tool(tool, args, again / "layer", again, outputs)[0],
            shards, again / "strace.txt", stored,
        )  # fmt: skip
        shutil.rmtree(again)
    return record, out


def _run_tool(
    tool: str,
    args: argparse.Namespace,
    layer: pathlib.Path,
    folder: pathlib.Path,
    outputs: tuple[str, ...],
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """`tool` run into `layer` (its log and queue in `folder`), measured."""
    if tool == "igneous":
        return bm.igneous_in_layer(args, layer, folder, igneous_parameters(args, outputs), HERE)
    tree = tree_state()
    record, out = bm.shardwright_convert(with_levels(args), [layer], folder, outputs)
    record["tree"] = tree
    return record, out


# --------------------------------------------------------------------------- the levels


def level_reader(layer: pathlib.Path, index: int) -> tuple[Any, tuple[int, ...]]:
    """A function reading a box ([x, y, z] slices, from voxel 0) of scale `index` of a
    precomputed volume, and the scale's size: TensorStore for the levels the tools added,
    CloudVolume for the base (CloudVolume names its gzipped chunks `*.gz`, which TensorStore
    does not look for: it reads them as missing, all 0)."""
    if index == 0:
        from cloudvolume import CloudVolume

        volume = CloudVolume(f"file://{layer}", mip=0, progress=False)
        return (lambda box: np.asarray(volume[box])[..., 0]), tuple(map(int, volume.shape[:3]))
    import tensorstore as ts

    kvstore = {"driver": "file", "path": f"{layer}/"}
    spec = {"driver": "neuroglancer_precomputed", "kvstore": kvstore, "scale_index": index}
    store = ts.open(spec, read=True).result()
    store = store[ts.d[:].translate_to[0]]
    return (lambda box: np.asarray(store[box].read().result())[..., 0]), tuple(store.shape[:3])


def tinybrain_levels(volume: np.ndarray, method: str, factor: tuple, count: int) -> list:
    """tinybrain's `count` levels above `volume` ([x, y, z]) in one call."""
    import tinybrain

    reduce = {"mode": tinybrain.downsample_segmentation,
              "average": tinybrain.downsample_with_averaging}[method]  # fmt: skip
    return [
        np.asarray(level) for level in reduce(np.asfortranarray(volume), factor, num_mips=count)
    ]


class Differences:
    """Voxels of a level compared with what they should be: how many, how many differ and, for
    an image, by how much (got - want: voxels)."""

    def __init__(self, numeric: bool) -> None:
        self.voxels = self.differing = 0
        self.by = collections.Counter() if numeric else None
        self.shapes: list[str] = []

    def add(self, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape:
            self.shapes.append(f"{got.shape} != {want.shape}")
            return
        wrong = got != want
        self.voxels += got.size
        self.differing += int(np.count_nonzero(wrong))
        if self.by is not None and wrong.any():
            values, counts = np.unique(
                got[wrong].astype(np.int64) - want[wrong].astype(np.int64), return_counts=True
            )
            self.by.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "voxels": self.voxels,
            "differing": self.differing,
            "equal": self.differing == 0 and not self.shapes,
        }
        if self.by is not None:
            out["got_minus_want"] = {str(k): v for k, v in sorted(self.by.items())}
        if self.shapes:
            out["shape_mismatches"] = self.shapes[:5]
        return out


class MeanErrors:
    """An image's level against the exact mean of the base's voxels each of its voxels
    stands for (float64): how far off, on average (absolute and signed) and at most."""

    def __init__(self) -> None:
        self.voxels, self.absolute, self.signed, self.most = 0, 0.0, 0.0, 0.0

    def add(self, got: np.ndarray, base: np.ndarray, factor: tuple, level: int) -> None:
        edge = [f**level for f in factor]
        if any(n % e for n, e in zip(base.shape, edge, strict=True)):
            return  # a partial block: left out
        blocks = [x for n, e in zip(base.shape, edge, strict=True) for x in (n // e, e)]
        off = got - base.reshape(blocks).mean(axis=(1, 3, 5))
        self.voxels += off.size
        self.absolute += float(np.abs(off).sum())
        self.signed += float(off.sum())
        self.most = max(self.most, float(np.abs(off).max()))

    def result(self) -> dict[str, Any]:
        n = self.voxels or 1
        return {
            "voxels": self.voxels,
            "mean_abs": round(self.absolute / n, 4),
            "mean_signed": round(self.signed / n, 4),
            "max_abs": round(self.most, 4),
        }


def reference_boxes(
    args: argparse.Namespace, sizes: list[tuple[int, ...]]
) -> list[list[tuple[slice, ...]]]:
    """`--reference-boxes` boxes of at most 16 x 16 x 4 voxels at the top level (the last at
    its far corner, the others at seeded places), each as its box at every level."""
    top = sizes[-1]
    edge = [min(n, e) for n, e in zip(top, (16, 16, 4), strict=True)]
    rng = np.random.default_rng(args.seed)
    corners = [rng.integers(0, [n - e + 1 for n, e in zip(top, edge, strict=True)]).tolist()
               for _ in range(max(0, args.reference_boxes - 1))]  # fmt: skip
    corners.append([n - e for n, e in zip(top, edge, strict=True)])
    boxes = []
    for corner in corners[: args.reference_boxes]:
        levels = []
        for k, size in enumerate(sizes):
            scale = [f ** (len(sizes) - 1 - k) for f in args.factor]
            levels.append(tuple(
                slice(c * s, min((c + e) * s, n))
                for c, e, s, n in zip(corner, edge, scale, size, strict=True)
            ))  # fmt: skip
        boxes.append(levels)
    return boxes


def check_levels(
    args: argparse.Namespace,
    method: str,
    source: pathlib.Path,
    outputs: dict[str, pathlib.Path],
    tools: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Each tool's added levels (scales 1 to --mips of its copy) read back with TensorStore in
    slabs along z and compared (see the docstring); per tool into its record's `levels`, the
    two tools against each other returned."""
    sys.path.insert(0, str(HERE.parents[1]))
    from tests.support.downsampling_reference import reference

    m, factor, numeric = args.mips, tuple(args.factor), method == "average"
    base, shape = level_reader(source, 0)
    sizes = [tuple(-(-n // f**k) for n, f in zip(shape, factor, strict=True))
             for k in range(m + 1)]  # fmt: skip
    readers: dict[str, list] = {}
    for tool, layer in outputs.items():
        scales = json.loads((layer / "info").read_text())["scales"]
        tools[tool]["levels"] = {"keys": [s["key"] for s in scales[1:]]}
        if len(scales) < m + 1:
            tools[tool]["levels"]["error"] = f"{len(scales) - 1} levels, not {m}"
            continue
        readers[tool] = [base] + [level_reader(layer, k)[0] for k in range(1, m + 1)]
    checks = ("vs_reduction_of_level_below", "vs_tinybrain_from_base", "vs_reference_boxes")
    diffs = {t: [{c: Differences(numeric) for c in checks} for _ in range(m)] for t in readers}
    means = {t: [MeanErrors() for _ in range(m)] for t in readers} if numeric else {}
    between = [Differences(numeric) for _ in range(m)]
    step = max(1, args.chunk[2] // factor[2] ** m)  # top-level planes: one chunk's at the base
    for first in range(0, sizes[m][2], step):
        zs = [slice(first * factor[2] ** (m - k), min((first + step) * factor[2] ** (m - k), n[2]))
              for k, n in enumerate(sizes)]  # fmt: skip
        below = base((slice(None), slice(None), zs[0]))
        from_base = tinybrain_levels(below, method, factor, m)
        got = {t: [below] + [read[k]((slice(None), slice(None), zs[k]))
                             for k in range(1, m + 1)] for t, read in readers.items()}  # fmt: skip
        for tool, levels in got.items():
            for k in range(1, m + 1):
                (again,) = tinybrain_levels(levels[k - 1], method, factor, 1)
                diffs[tool][k - 1]["vs_reduction_of_level_below"].add(levels[k], again)
                diffs[tool][k - 1]["vs_tinybrain_from_base"].add(levels[k], from_base[k - 1])
                if numeric:
                    means[tool][k - 1].add(levels[k], below, factor, k)
        if len(got) == 2:
            for k in range(1, m + 1):
                between[k - 1].add(got["igneous"][k], got["shardwright"][k])
    for box in reference_boxes(args, sizes):
        want = [base(box[0])[..., None]]
        for _ in range(m):
            want.append(reference(want[-1], factor, method))
        for tool, levels in readers.items():
            for k in range(1, m + 1):
                diffs[tool][k - 1]["vs_reference_boxes"].add(levels[k](box[k]), want[k][..., 0])
    for tool in readers:
        tools[tool]["levels"]["per_level"] = [
            {"level": k + 1, "shape": list(sizes[k + 1]),
             **{c: d.result() for c, d in diffs[tool][k].items()},
             **({"vs_base_block_mean": means[tool][k].result()} if numeric else {})}
            for k in range(m)
        ]  # fmt: skip
    return {
        "method": method,
        "factor": list(factor),
        "reader": "levels: TensorStore; the base: CloudVolume (TensorStore reads its *.gz "
        "chunks as missing)",
        "tinybrain": "downsample_segmentation / downsample_with_averaging (sparse=False) of "
        "the level below, num_mips=1; from the base: num_mips=N in one call",
        "reference": "tests/support/downsampling_reference.reference, level by level from "
        f"the base, on {args.reference_boxes} boxes of <= 16 x 16 x 4 top-level voxels",
        "igneous_vs_shardwright": [
            {"level": k + 1, **d.result()} for k, d in enumerate(between)
        ] if len(readers) == 2 else None,
    }  # fmt: skip


# --------------------------------------------------------------------------- report


def tree_state() -> dict[str, Any]:
    """The commit measured, what in src/ differs from it (read only: git takes no lock) and a
    digest of src/'s Python files (the tree may be edited while this runs)."""
    root = HERE.parents[1]

    def git(*words: str) -> str:
        run = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), *words],
            capture_output=True,
            text=True,
        )
        return run.stdout.rstrip()

    digest = hashlib.sha256()
    for path in sorted((root / "src").rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return {
        "head": git("rev-parse", "HEAD"),
        "uncommitted_in_src": git("status", "--porcelain", "--", "src").splitlines(),
        "src_py_sha256": digest.hexdigest(),
    }


def _get(*keys: str) -> Any:
    def get(record: dict[str, Any]) -> Any:
        for key in keys:
            record = record.get(key) if isinstance(record, dict) else None
        return record

    return get


def _levels_row(check: str) -> tuple[str, Any]:
    """A table row: per added level, how many voxels differ from what `check` compares with."""

    def cell(record: dict[str, Any]) -> str:
        levels = _get("levels", "per_level")(record) or []
        return "/".join(str(level[check]["differing"]) for level in levels) or "-"

    return f"levels {check[3:]}", cell


def _level_mib(record: dict[str, Any]) -> float:
    added = _get("objects", "levels_added")(record) or {}
    return sum((entry or {}).get("bytes", 0) for entry in added.values()) / 2**20


EXTRA_ROWS = (
    ("block read MiB (tree)", lambda r: r.get("block_read_bytes", 0) / 2**20),
    ("scale opens", _get("scale_reads", "opened", "opens")),
    ("scale read / stored (opens)", _get("scale_reads", "opened", "read_over_stored")),
    ("scale read / stored (syscalls)", _get("scale_reads", "read_syscalls", "read_over_stored")),
    ("scale from disk / stored", _get("scale_reads", "fetched_from_disk", "over_stored_pages")),
    ("levels MiB added", _level_mib),
    ("originals kept (bar info)", _get("objects", "kept_originals")),
    ("originals changed", lambda r: ",".join(_get("objects", "changed")(r) or []) or "-"),
    ("added beside mesh/skel", lambda r: ",".join(_get("objects", "added_elsewhere")(r) or {})),
    ("others' CPU s meanwhile", _get("others_cpu_seconds")),
    ("load before", _get("loadavg_before")),
    ("waited for load s", _get("load_wait", "waited_seconds")),
    _levels_row("vs_reduction_of_level_below"),
    _levels_row("vs_tinybrain_from_base"),
    _levels_row("vs_reference_boxes"),
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bm.add_options(parser)
    parser.add_argument("--case", choices=(*CASES, "both"), default="both")
    parser.add_argument("--image-shape", type=bm._xyz, default=IMAGE_SHAPE, help="X,Y,Z voxels")
    parser.add_argument("--mips", type=int, default=2, help="levels added (both tools)")
    parser.add_argument("--factor", type=bm._xyz, default=(2, 2, 1), help="between levels")
    parser.add_argument("--reference-boxes", type=int, default=4, help="see the docstring")
    parser.add_argument(
        "--unsharded-source", action="store_true", help="add to the unsharded segmentation"
    )
    parser.add_argument(
        "--wait-for-load", type=float, default=None, help="before each run: 1-minute load below"
    )
    parser.add_argument("--wait-most", type=float, default=1200, help="seconds per wait")
    parser.add_argument(
        "--out", default=None, help="JSON path (default results/in_place-DATE-CASE.json)"
    )
    return bm.finish_args(parser.parse_args(argv))


def run_case(case: str, args: argparse.Namespace, work: pathlib.Path) -> dict[str, Any]:
    """Both tools on a copy each of the case's dataset, then the quality of the meshes and
    skeletons and the levels' check; the case's record."""
    made, method = CASES[case]
    if case == "segmentation":
        source, stamp = bm.source_volume(args, work)
        if not args.unsharded_source:
            source, stamp = sharded_source(args, work, source, stamp)
    else:
        source, stamp = image_volume(args, work)
    scale = json.loads((source / "info").read_text())["scales"][0]["key"]
    stored = sum(p.stat().st_size for p in (source / scale).iterdir() if p.is_file())
    load_before = os.getloadavg()
    tools: dict[str, dict[str, Any]] = {}
    outputs: dict[str, pathlib.Path] = {}
    for tool in TOOLS:
        if getattr(args, f"skip_{tool}"):
            continue
        tools[tool], layer = run_tool(tool, case, args, source, work, scale)
        if layer is not None:
            outputs[tool] = layer
    load_after = os.getloadavg()  # before the checks, which keep the machine busy
    reference = bm.add_quality(args, source, work, tools, outputs) if made else None
    levels = check_levels(args, method, source, outputs, tools) if outputs else None
    ratio = bm.time_ratio(tools, "igneous", "shardwright")
    cpu = [tools.get(t, {}).get("cpu_seconds") for t in TOOLS]
    read = _get("shardwright", "scale_reads", "read_syscalls", "read_over_stored")(tools) or _get(
        "shardwright", "scale_reads", "opened", "read_over_stored"
    )(tools)
    return {
        "loadavg": {"before": list(load_before), "after": list(load_after)},
        "parameters": {
            "source": stamp,
            "scale": {
                "key": scale,
                "files": sum(1 for p in (source / scale).iterdir() if p.is_file()),
                "stored_bytes": stored,
            },
            "cores": args.cores,
            "work": str(work),
            "reference": reference,
            "shardwright_args": with_levels(args).shardwright_args.strip(),
            "shardwright_block": list(bm.our_block(args)) if made else None,
            "igneous": igneous_parameters(args, made),
        },
        "tools": tools,
        "levels": levels,
        "igneous_over_shardwright_time": ratio,
        "igneous_over_shardwright_cpu": round(cpu[0] / cpu[1], 3) if all(cpu) else None,
        "goals": {
            "igneous_over_shardwright_time": {
                "at_least": TIME_GOAL,
                "value": ratio,
                "met": None if ratio is None else ratio >= TIME_GOAL,
            },
            "shardwright_read_over_stored": {
                "at_most": READ_GOAL,
                "value": read,
                "met": None if read is None else read <= READ_GOAL,
            },
        },
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["igneous-worker"]:  # in Igneous's environment
        igneous_worker(argv[1:])
        return
    if argv[:1] == ["igneous-shard"]:  # in Igneous's environment
        igneous_shard(*argv[1:3])
        return
    args = parse_args(argv)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench_in_place-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    name = f"in_place-{datetime.date.today()}-{args.case}.json"
    out = pathlib.Path(args.out) if args.out else RESULTS / name
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "benchmark": "in_place",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(*bm.PACKAGES),
        "tree": tree_state(),
        "cases": {},
    }
    for case in CASES if args.case == "both" else (args.case,):
        found = record["cases"][case] = run_case(case, args, work)
        out.write_text(json.dumps(record, indent=2) + "\n")  # what is done so far
        print(f"\n{case}:")
        bm.print_table(found["tools"], EXTRA_ROWS)
        print(
            f"load average before {found['loadavg']['before']}, after {found['loadavg']['after']}"
        )
        for goal, value in found["goals"].items():
            print(f"{goal}: {value}")
        for level in (found["levels"] or {}).get("igneous_vs_shardwright") or []:
            print(f"level {level['level']}, igneous vs shardwright: {level}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
