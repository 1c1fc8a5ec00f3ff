"""Conversion throughput to an S3 endpoint (moto's server on 127.0.0.1) vs to local disk.

Same source, same plan, same process; the S3 run includes the preflight probe, one PUT per
shard and the metadata. The figure that matters is the ratio: how much the object-store
path (HTTP, retries layer, upload) costs over a local write.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import write_result  # noqa: E402

for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "bench"),
    ("AWS_SECRET_ACCESS_KEY", "bench"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
):
    os.environ.setdefault(_name, _value)

from shardwright import api  # noqa: E402
from shardwright.cli.demo import write_demo_volumes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="64 MiB instead of 256 MiB")
    parser.add_argument("--compression", default="gzip", choices=("none", "gzip"))
    args = parser.parse_args()
    size = (512, 512, 256) if args.quick else (1024, 1024, 256)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="sw-s3-bench-"))
    source = str(workdir / "image.npy")
    write_demo_volumes(size, source, None)
    nbytes = size[0] * size[1] * size[2]

    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
    s3fs.S3FileSystem(**options).mkdir("bench")
    common = dict(compression=args.compression, resolution=(8, 8, 40), progress=False)
    figures: dict[str, object] = {"source_bytes": nbytes, "compression": args.compression}
    try:
        for name, dest, extra in (
            ("local", str(workdir / "out"), {}),
            ("s3_emulator", "s3://bench/out", {"storage_options": options}),
        ):
            started = time.perf_counter()
            manifest = api.convert(source, dest, **common, **extra)
            seconds = time.perf_counter() - started
            assert isinstance(manifest, api.Manifest)
            figures[name] = {
                "seconds": seconds,
                "mb_per_s": nbytes / seconds / 1e6,
                "shards": manifest.totals.shards,
                "requests": manifest.totals.requests,
            }
            print(
                f"{name:12s} {seconds:6.2f} s  {nbytes / seconds / 1e6:7.1f} MB/s  "
                f"{manifest.totals.requests}"
            )
        local_s = figures["local"]["seconds"]  # type: ignore[index]
        figures["ratio_s3_over_local_time"] = figures["s3_emulator"]["seconds"] / local_s  # type: ignore[index]
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    path = write_result(
        "object_store-quick" if args.quick else "object_store",
        figures,
        ("shardwright", "s3fs", "moto", "dask"),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
