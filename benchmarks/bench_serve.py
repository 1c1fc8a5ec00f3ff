"""The data server under parallel readers: requests/s and p50/p99 latency of small `info`
reads and of shard range reads, against `python -m http.server` (the floor to beat) in the
same run, on loopback. http.server ignores Range (it sends the whole 64 MiB shard, over
HTTP/1.0, a connection per request): its range figures are what a reader of it would get.

Each round opens N reader threads; each reader makes its requests on a connection of its own
(keep-alive, as a viewer's fetches do), `--requests` each. `--module FILE` benchmarks another
version of `serve.py` as well (e.g. `git show REV:src/shardwright/serve.py > /tmp/old.py`).

    .venv/bin/python benchmarks/bench_serve.py [--readers 16,64,200] [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import RESULTS, write_result  # noqa: E402

from shardwright import serve  # noqa: E402

SHARD_BYTES = 64 << 20
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


def _ours(module: Any, root: pathlib.Path) -> tuple[int, Any]:
    server = module.make_server(str(root), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1]), server


def _stdlib(root: pathlib.Path) -> tuple[int, subprocess.Popen[bytes]]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
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
    servers: dict[str, Any] = {"shardwright": serve}
    if args.module is not None:
        spec = importlib.util.spec_from_file_location("other_serve", args.module)
        assert spec is not None and spec.loader is not None
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
        servers[f"shardwright ({args.module.name})"] = other
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = pathlib.Path(tmp)
        (root / "ds" / "0").mkdir(parents=True)
        (root / "ds" / "info").write_text('{"type": "image", "scales": []}')
        (root / "ds" / "0" / "0.shard").write_bytes(np.random.default_rng(1).bytes(SHARD_BYTES))
        for name, module in [*servers.items(), ("python -m http.server", None)]:
            port, handle = _stdlib(root) if module is None else _ours(module, root)
            try:
                for kind in ("info", "range"):
                    for n in counts:
                        row = _readers(port, n, requests, kind)
                        figures.setdefault(name, {})[f"{kind}/{n} readers"] = row
                        print(f"{name:<32} {kind:<6} {n:>4} readers: {row}", flush=True)
            finally:
                if module is None:
                    handle.terminate()
                    handle.wait()
                else:
                    handle.shutdown()
                    handle.server_close()
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
