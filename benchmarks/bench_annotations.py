"""Annotations from a table: shardwright's job against neuroglancer's `AnnotationWriter`.

A table of N synapses (points with a pre- and a post-synaptic segment id among M segments and
a float32 score) is written as a Parquet file, then converted:

- by neuroglancer's `write_annotations.AnnotationWriter` (every annotation added in Python and
  held in memory, unsharded indexes: one file per annotation, per segment and per cell of its
  single spatial level), in a fresh process;
- by `shardwright convert TABLE DEST --annotation-type point ...` in a fresh process on a
  thread pool (`--scheduler threads`: the job and its tasks in one process, so its peak
  resident memory is the job's).

For each: wall seconds, rows per second, the process's peak resident memory (ru_maxrss) and
the objects written; shardwright's output is read back by `AnnotationReader` (a sample of
ids, and the spatial index whole when it is small). `--ours-rows` runs shardwright alone at
a larger N (the peer holds every annotation in memory: 10^8 of them do not fit this machine).

    .venv/bin/python benchmarks/bench_annotations.py --rows 1000000 --ours-rows 100000000
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import write_result  # noqa: E402

PEER = textwrap.dedent("""
    import sys, pyarrow.parquet as pq, neuroglancer
    from neuroglancer import write_annotations
    table = pq.read_table(sys.argv[1]).to_pandas()
    space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[8, 8, 40])
    writer = write_annotations.AnnotationWriter(
        space, "point", relationships=["pre", "post"],
        properties=[neuroglancer.AnnotationPropertySpec(id="score", type="float32")])
    for row in table.itertuples(index=False):
        writer.add_point([row.x, row.y, row.z], id=int(row.id), score=row.score,
                         pre=[int(row.pre)], post=[int(row.post)] if row.post else [])
    writer.write(sys.argv[2])
""")


def _table(path: pathlib.Path, rows: int, segments: int) -> None:
    """The synapses, written in row groups so no step holds more than one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    step = 2_000_000
    writer = None
    for start in range(0, rows, step):
        n = min(step, rows - start)
        batch = pa.table({
            "id": np.arange(start + 1, start + 1 + n, dtype=np.uint64),
            "x": rng.uniform(0, 40_000, n).astype(np.float32),
            "y": rng.uniform(0, 40_000, n).astype(np.float32),
            "z": rng.uniform(0, 5_000, n).astype(np.float32),
            "pre": rng.integers(1, segments + 1, n, dtype=np.uint64),
            "post": rng.integers(0, segments + 1, n, dtype=np.uint64),
            "score": rng.random(n, dtype=np.float32),
        })  # fmt: skip
        writer = writer or pq.ParquetWriter(path, batch.schema)
        writer.write_table(batch)
    assert writer is not None
    writer.close()


# A wrapper process per measurement: the peak resident memory of its own children only.
MEASURE = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
    "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def _run(args: list[str]) -> dict[str, Any]:
    """A fresh process: its wall seconds and peak resident memory."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *args], check=True,
                          capture_output=True, text=True)  # fmt: skip
    seconds = time.perf_counter() - started
    peak_kib = int(done.stdout.strip().splitlines()[-1])
    return {"seconds": round(seconds, 2), "peak_rss_bytes": peak_kib * 1024}


def _objects(root: pathlib.Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and ".shardwright" not in p.parts)


def _ours(table: pathlib.Path, dest: pathlib.Path, rows: int) -> dict[str, Any]:
    measured = _run([sys.executable, "-m", "shardwright", "convert", str(table), str(dest),
                     "--annotation-type", "point", "--resolution", "8,8,40",
                     "--relationship", "pre=pre", "--relationship", "post=post",
                     "--scheduler", "threads", "--quiet"])  # fmt: skip
    from neuroglancer.read_precomputed_annotations import AnnotationReader

    reader = AnnotationReader(f"file://{dest}/")
    sample = np.random.default_rng(1).choice(rows, min(rows, 200), replace=False) + 1
    found = sum(reader.by_id[int(i)] is not None for i in sample.tolist())
    assert found == sample.size, f"{sample.size - found} sampled ids missing"
    if rows <= 2_000_000:
        spatial = sum(1 for _ in reader.get_within_spatial_bounds())
        assert spatial == rows, f"the spatial index holds {spatial} of {rows}"
    return {**measured, "rows_per_second": round(rows / measured["seconds"]),
            "objects": _objects(dest), "levels": len(reader.metadata["spatial"])}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--ours-rows", type=int, default=0, help="shardwright alone at this N")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--work", type=pathlib.Path, default=None)
    args = parser.parse_args()
    figures: dict[str, Any] = {"rows": args.rows, "segments": args.segments}
    with tempfile.TemporaryDirectory(prefix="bench-annotations-", dir=args.work) as tmp:
        root = pathlib.Path(tmp)
        table = root / "synapses.parquet"
        _table(table, args.rows, args.segments)
        figures["shardwright"] = _ours(table, root / "ours", args.rows)
        print("shardwright", figures["shardwright"], flush=True)
        if not args.skip_peer:
            peer = root / "peer"
            figures["annotation_writer"] = {
                **_run([sys.executable, "-c", PEER, str(table), str(peer)]),
                "objects": _objects(peer),
            }
            figures["annotation_writer"]["rows_per_second"] = round(
                args.rows / figures["annotation_writer"]["seconds"])  # fmt: skip
            print("AnnotationWriter", figures["annotation_writer"], flush=True)
            figures["speedup"] = round(figures["annotation_writer"]["seconds"]
                                       / figures["shardwright"]["seconds"], 2)  # fmt: skip
        if args.ours_rows:
            big = root / "big.parquet"
            _table(big, args.ours_rows, args.segments)
            os.remove(table)
            figures["shardwright_alone"] = {"rows": args.ours_rows,
                                            **_ours(big, root / "big", args.ours_rows)}  # fmt: skip
            print("shardwright alone", figures["shardwright_alone"], flush=True)
    print("wrote", write_result("annotations", figures, ("shardwright", "neuroglancer", "dask")))


if __name__ == "__main__":
    main()
