"""Meshes and skeletons added in place to a segmentation that exists: shardwright vs Igneous.

The dataset is bench_meshes.py's deterministic neuron-like uint64 segmentation (default 512 x
512 x 256 voxels at 8 x 8 x 40 nm, ~1,000 segments; CloudVolume-written, unsharded, 64^3
chunks, compressed_segmentation + gzip), written once under `WORK/src` (reused where the same
options wrote it). Each tool gets a fresh copy of it (`WORK/in_place_TOOL/layer`, not timed),
so both start from the same bytes, and writes into that copy:

- **shardwright**: `python -m shardwright.cli convert COPY --generate-meshes
  --generate-skeletons` (plus `--shardwright-args`, e.g. `--mesh-block`), one process tree.
- **Igneous**: forge (sharded) and merge-sharded of meshes and of skeletons with its command
  line's defaults, run exactly as bench_meshes.py runs them (one worker process in Igneous's
  environment: task creation into a FileQueue, `igneous -p CORES execute -x`, twice).

Each run is measured as bench_meshes.py's `run_measured` does (wall time end to end, user +
system CPU seconds of the waited-for tree, peak of the summed RSS and PSS of its processes
sampled every 0.1 s) and, here, what it read of the dataset's scale:

- **opened**: every open of a file of the scale, seen by fanotify (FAN_OPEN on the scale's
  folder, per thread; needs root) while the tool runs. Both tools read a chunk file whole
  each time they open it, so the opens times the files' sizes are the bytes read through the
  filesystem, page-cache hits included, i.e. the GETs a bucket would have served; over the
  scale's stored bytes this is `read_over_stored`. The kernel merges a thread's second open of
  a file into the first while that event is still unread, so this is a lower bound (the
  events are read as they come).
- **fetched from disk**: the scale's pages are dropped from the page cache before the run
  (`sync`, `posix_fadvise(DONTNEED)`), and the bytes of them resident afterwards (`fincore`)
  are the distinct bytes the run made the kernel read (readahead included, whole pages). The
  tree's `block_read_bytes` (read_bytes of /proc/PID/io, summed by getrusage) also counts
  any other file it read that was not in the page cache.

Afterwards every file the copy had (its chunks, `provenance`, ...) is compared with crc32c to
what it was before; `kept_originals` says whether all but `info` are byte-identical, and the
record lists what changed in `info` and every top-level entry the tool added (files, bytes).
Quality is bench_meshes.py's (LOD 0 area over zmesh's unsimplified mesh of the whole volume,
cable over kimimaro's on the whole volume), read back from each copy with CloudVolume.

Igneous runs in its own environment (see bench_meshes.py's docstring):

    .venv/bin/python benchmarks/bench_in_place.py --igneous-python /work/igneous-venv/bin/python
    .venv/bin/python benchmarks/bench_in_place.py --shape 128,128,64 --work /tmp/bip \\
        --igneous-python /work/igneous-venv/bin/python                # quick try
    .venv/bin/python benchmarks/bench_in_place.py --skip-igneous --work /tmp/bip

The JSON goes to `results/in_place-DATE.json` (`--out` elsewhere), with the machine, the load
before and after, the tree measured (HEAD and what is uncommitted in src/) and
`igneous_over_shardwright_time` (the issue's goal: at least 3).
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
import resource
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Any

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import bench_meshes as bm  # noqa: E402
from _common import RESULTS, machine, versions  # noqa: E402

TOOLS = ("igneous", "shardwright")
OURS = ("mesh", "skeletons", ".shardwright")  # where shardwright writes beside `info`
PAGE = os.sysconf("SC_PAGE_SIZE")


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
    return {
        "original_files": len(before),
        "kept_originals": not removed and changed in ([], ["info"]),
        "changed": changed,
        "removed": removed,
        "info_keys_added": sorted(set(info) - set(info_before)),
        "info_keys_changed": sorted(k for k in info_before if info.get(k) != info_before[k]),
        "added": added,
        # beside the directories the new info names (and shardwright's own .shardwright/)
        "added_elsewhere": {k: v for k, v in added.items() if k not in named | {OURS[2]}},
    }


# --------------------------------------------------------------------------- reads of the scale


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


def run_tool(
    tool: str, args: argparse.Namespace, source: pathlib.Path, work: pathlib.Path, scale: str
) -> tuple[dict[str, Any], pathlib.Path | None]:
    """A fresh copy of `source`, `tool` run into it, measured; its record and the copy (None
    where the tool failed)."""
    folder = work / f"in_place_{tool}"
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
    busy, own = machine_busy_seconds(), _cpu_seconds()
    with ScaleOpens((layer / scale).resolve(), sizes) as opens:
        if tool == "igneous":
            record, out = bm.igneous_in_layer(args, layer, folder, bm.igneous_parameters(args))
        else:
            tree = tree_state()
            record, out = bm.shardwright_convert(args, [layer], folder)
            after = tree_state()
            record["tree"] = tree
            record["tree_changed_during_run"] = after != tree
    # the machine's busy CPU time during the run, less this process's (its sampling and event
    # threads) and its children's (the tool's tree, shardwright's bytecode compile before it):
    # what other work on the machine took meanwhile
    record["others_cpu_seconds"] = round(machine_busy_seconds() - busy - (_cpu_seconds() - own), 1)
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
    return record, out


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


EXTRA_ROWS = (
    ("block read MiB (tree)", lambda r: r.get("block_read_bytes", 0) / 2**20),
    ("scale opens", _get("scale_reads", "opened", "opens")),
    ("scale read / stored", _get("scale_reads", "opened", "read_over_stored")),
    ("scale from disk / stored", _get("scale_reads", "fetched_from_disk", "over_stored_pages")),
    ("originals kept (bar info)", _get("objects", "kept_originals")),
    ("originals changed", lambda r: ",".join(_get("objects", "changed")(r) or []) or "-"),
    ("added beside mesh/skel", lambda r: ",".join(_get("objects", "added_elsewhere")(r) or {})),
    ("others' CPU s meanwhile", _get("others_cpu_seconds")),
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bm.add_options(parser)
    parser.add_argument("--out", default=None, help="JSON path (default results/in_place-DATE)")
    return bm.finish_args(parser.parse_args(argv))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench_in_place-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    source, stamp = bm.source_volume(args, work)
    scale = json.loads((source / "info").read_text())["scales"][0]["key"]
    scale_files = [p for p in (source / scale).iterdir() if p.is_file()]

    tools: dict[str, dict[str, Any]] = {}
    outputs: dict[str, pathlib.Path] = {}
    for tool in TOOLS:
        if getattr(args, f"skip_{tool}"):
            continue
        tools[tool], layer = run_tool(tool, args, source, work, scale)
        if layer is not None:
            outputs[tool] = layer
    reference = bm.add_quality(args, source, work, tools, outputs)
    ratio = bm.time_ratio(tools, "igneous", "shardwright")
    cpu = [tools.get(t, {}).get("cpu_seconds") for t in TOOLS]
    record = {
        "benchmark": "in_place",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(*bm.PACKAGES),
        "tree": tools.get("shardwright", {}).get("tree") or tree_state(),
        "loadavg": {"before": list(load_before), "after": list(os.getloadavg())},
        "parameters": {
            "source": stamp,
            "scale": {
                "key": scale,
                "files": len(scale_files),
                "stored_bytes": sum(p.stat().st_size for p in scale_files),
            },
            "cores": args.cores,
            "work": str(work),
            "reference": reference,
            "shardwright_args": args.shardwright_args,
            "shardwright_block": list(bm.our_block(args)),
        },
        "tools": tools,
        "igneous_over_shardwright_time": ratio,
        "igneous_over_shardwright_cpu": round(cpu[0] / cpu[1], 3) if all(cpu) else None,
        "goal_igneous_over_shardwright_time": 3.0,
    }
    out = pathlib.Path(args.out) if args.out else RESULTS / f"in_place-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    bm.print_table(tools, EXTRA_ROWS)
    print(f"load average before {load_before}, after {os.getloadavg()}")
    if ratio is not None:
        print(f"igneous / shardwright time: {ratio} (goal >= 3)")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
