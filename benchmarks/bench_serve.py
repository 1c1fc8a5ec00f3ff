"""The data server under parallel readers: requests/s and p50/p99 latency of small `info`
reads and of shard range reads, against `python -m http.server` (the floor to beat) in the
same run, on loopback. http.server ignores Range (it sends the whole 4 MiB shard, over
HTTP/1.0, a connection per request): its range figures are what a reader of it would get.

Each round opens N reader threads; each reader makes its requests on a connection of its own
(keep-alive, as a viewer's fetches do), `--requests` each. `--module FILE` benchmarks another
version of `serve.py` as well (e.g. `git show REV:src/shardwright/viewing/serve.py > /tmp/old.py`).

    .venv/bin/python benchmarks/bench_serve.py [--readers 16,64,200] [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import RESULTS, write_result  # noqa: E402

from shardwright.viewing import serve  # noqa: E402

SHARD_BYTES = 4 << 20  # http.server sends all of it for every range read
RANGE_BYTES = 32 << 10  # a compressed chunk's size


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _readers(port: int, readers: int, requests: int, kind: str) -> dict[str, float]:
    """`readers` threads, each on its own keep-alive connection, `requests` reads each."""
    rng = np.random.default_rng(0)
    starts = rng.integers(0, SHARD_BYTES - RANGE_BYTES, readers * requests).tolist()

    def one_reader(i: int) -> list[float]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        took = []
        for j in range(requests):
            if kind == "info":
                path, headers = "/ds/info", {}
            else:
                start = starts[i * requests + j]
                path, headers = (
                    "/ds/0/0.shard",
                    {"Range": f"bytes={start}-{start + RANGE_BYTES - 1}"},
                )
            begun = time.perf_counter()
            try:
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                response.read()
                ok = response.status in (200, 206)
            except (OSError, http.client.HTTPException):
                ok = False
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            took.append(time.perf_counter() - begun if ok else float("inf"))
        connection.close()
        return took

    begun = time.perf_counter()
    with ThreadPoolExecutor(readers) as pool:
        latencies = np.array([t for batch in pool.map(one_reader, range(readers)) for t in batch])
    seconds = time.perf_counter() - begun
    done = latencies[np.isfinite(latencies)]
    return {
        "requests": int(latencies.size),
        "failed": int(latencies.size - done.size),
        "requests_per_s": round(done.size / seconds, 1),
        "p50_ms": round(float(np.percentile(done, 50)) * 1e3, 2) if done.size else None,
        "p99_ms": round(float(np.percentile(done, 99)) * 1e3, 2) if done.size else None,
        "max_ms": round(float(done.max()) * 1e3, 2) if done.size else None,
    }


_SERVE_FILE = (  # a version of serve.py, loaded from its file, serving in its own process
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('measured_serve', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module.serve(sys.argv[2], port=int(sys.argv[3]))\n"
)


def _start(root: pathlib.Path, serve_file: pathlib.Path | None) -> tuple[int, Any]:
    """A server in a process of its own (as readers meet it: no GIL shared with them), of
    `serve_file` or, without one, `python -m http.server`."""
    port = _free_port()
    command = (
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        if serve_file is None
        else [sys.executable, "-c", _SERVE_FILE, str(serve_file), str(root), str(port)]
    )
    process = subprocess.Popen(
        command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return port, process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", default="16,64,200")
    parser.add_argument("--requests", type=int, default=20, help="reads per reader")
    parser.add_argument("--module", type=pathlib.Path, help="another serve.py to measure too")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args()
    counts = [4] if args.quick else [int(n) for n in args.readers.split(",")]
    requests = 3 if args.quick else args.requests
    servers: dict[str, pathlib.Path | None] = {"shardwright": pathlib.Path(serve.__file__)}
    if args.module is not None:
        servers[f"shardwright ({args.module.name})"] = args.module.resolve()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = pathlib.Path(tmp)
        (root / "ds" / "0").mkdir(parents=True)
        (root / "ds" / "info").write_text('{"type": "image", "scales": []}')
        (root / "ds" / "0" / "0.shard").write_bytes(np.random.default_rng(1).bytes(SHARD_BYTES))
        for name, serve_file in [*servers.items(), ("python -m http.server", None)]:
            port, process = _start(root, serve_file)
            try:
                for kind in ("info", "range"):
                    for n in counts:
                        row = _readers(port, n, requests, kind)
                        figures.setdefault(name, {})[f"{kind}/{n} readers"] = row
                        print(f"{name:<32} {kind:<6} {n:>4} readers: {row}", flush=True)
            finally:
                process.terminate()
                process.wait()
    ours, floor = figures["shardwright"], figures["python -m http.server"]
    figures["ratios_vs_http_server"] = {
        key: {
            "requests_per_s": round(ours[key]["requests_per_s"] / floor[key]["requests_per_s"], 2),
            "p99": round(ours[key]["p99_ms"] / floor[key]["p99_ms"], 2)
            if ours[key]["p99_ms"] and floor[key]["p99_ms"]
            else None,
        }
        for key in ours
    }
    path = write_result("serve" + ("-quick" if args.quick else ""), figures, ("shardwright",),
                        directory=args.out)  # fmt: skip
    print(f"written {path}")


if __name__ == "__main__":
    main()
