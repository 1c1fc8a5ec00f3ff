"""The job across hosts (network namespaces, tests/support/netns_lab.py) on 1, 2 and 3 worker
hosts, with 0, 20 and 100 ms added round-trip time between every host and the object store
(moto's S3 server), and 100 ms with 1 % packet loss: how much a shard task waits on its
requests.

Each run: a fresh lab, the same TensorStore-written zarr v3 source (16 MiB, 128 shards), one
`shardwright convert --scheduler tcp://...` from the client host; its wall time as the job
reports it, its store requests and retries from the manifest. The latency comes from
tests/support/delay_proxy.py (this kernel has no netem), in front of the store for every run
with a latency, 0 ms included, so the proxy's own cost is in the baseline: a run straight to the
store is measured beside it. Needs root, `ip` and `nft`.

    sudo .venv/bin/python benchmarks/bench_hosts.py [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))  # the tests' helpers: tests.support
from _common import write_result  # noqa: E402

from tests.support import netns_hosts, netns_lab  # noqa: E402

WROTE = re.compile(r"wrote (\d+) shards, \d+ chunks, ([\d,]+) bytes to \S+ in ([\d.]+) s")


def one_run(workers: int, rtt_ms: float | None, loss: float, threads: int) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(prefix="sw-hosts-") as logs,
        netns_lab.lab(
            pathlib.Path(logs), workers=workers, rtt_ms=rtt_ms, loss_percent=loss, threads=threads
        ) as lab,  # fmt: skip
    ):
        lab.write_source()
        job, log = lab.start_job()
        code = job.wait(timeout=1800)
        said = log.read_text()
        found = WROTE.search(said)
        if code != 0 or found is None:
            raise SystemExit(f"the job failed ({code}):\n{said[-3000:]}")
        shards, nbytes, seconds = int(found[1]), int(found[2].replace(",", "")), float(found[3])
        manifest = json.loads(
            lab.filesystem().cat(f"{netns_lab.BUCKET}/out/shardwright-manifest.json")
        )
    requests = manifest["totals"]["requests"]
    return {
        "workers": workers,
        "threads_per_worker": threads,
        "rtt_ms": rtt_ms,
        "loss_percent": loss,
        "seconds": seconds,
        "shards": shards,
        "bytes": nbytes,
        "shards_per_s": round(shards / seconds, 2),
        "mib_per_s": round(nbytes / seconds / 2**20, 3),
        "requests": requests,
        "requests_per_shard": round(sum(requests.values()) / shards, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="threads of each worker")
    parser.add_argument("--quick", action="store_true", help="2 workers, 0 and 100 ms only")
    args = parser.parse_args()
    if (why := netns_hosts.loss_skip_reason()) is not None:
        raise SystemExit(f"cannot make test hosts here: {why}")
    cases: list[tuple[int, float | None, float]] = [(2, None, 0.0)]
    for workers in (2,) if args.quick else (1, 2, 3):
        cases += [(workers, rtt, 0.0) for rtt in ((0.0, 100.0) if args.quick else (0, 20, 100))]
    cases.append((2, 100.0, 1.0))
    runs = []
    for workers, rtt, loss in cases:
        run = one_run(workers, rtt, loss, args.threads)
        print(json.dumps(run), flush=True)
        runs.append(run)
    name = "hosts-quick" if args.quick else "hosts"  # a smoke run keeps the full result
    path = write_result(name, {"source_bytes": 2 * math.prod(netns_lab.SHAPE), "runs": runs},
                        ("shardwright", "distributed", "moto", "s3fs", "tensorstore"))  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
