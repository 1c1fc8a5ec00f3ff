"""What the peers do with the sources the field holds, recorded beside what shardwright does
(no timings: behaviour). Each case is a small volume written by CloudVolume:

- a local volume whose chunks are `.gz` files (CloudVolume's default on disk);
- a volume with one chunk absent;
- chunks on S3 (moto's server on 127.0.0.1) stored with `Content-Encoding: gzip`;
- an S3 endpoint that accepts connections and never answers.

Results go to `results/peers_on_field_sources-DATE.json`.
"""

from __future__ import annotations

import gzip
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import write_result  # noqa: E402

WAIT = 90.0  # how long a call that does not answer is waited for


def _volume(path: str, data: np.ndarray, compress: Any) -> None:
    from cloudvolume import CloudVolume

    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="image", data_type="uint8", encoding="raw",
        resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=[32, 32, 16],
        volume_size=list(data.shape[:3]),
    )  # fmt: skip
    cv = CloudVolume(f"file://{path}", info=info, compress=compress, progress=False)
    cv.commit_info()
    cv[:, :, :] = data


def _outcome(fn: Callable[[], Any], want: np.ndarray | None = None) -> str:
    """What a read did within WAIT seconds: exact, zeros, wrong data, an error, or nothing."""
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            got = fn()
            if want is None:
                box["said"] = "returned"
            else:
                got = np.asarray(got)
                box["said"] = (
                    "exact" if np.array_equal(got, want)
                    else "all zeros, no error" if not got.any() else "wrong data, no error"
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - what the peer raised is the record
            box["said"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        box["seconds"] = round(time.monotonic() - started, 1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT)
    if "seconds" not in box:
        return f"no answer after {WAIT:g} s (still waiting)"
    return f"{box['said']} ({box['seconds']} s)"


def main() -> None:
    import boto3
    import tensorstore as ts
    from cloudvolume import CloudVolume
    from moto.server import ThreadedMotoServer

    from shardwright.sources import open_source

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    root = tempfile.mkdtemp(prefix="peers-")
    data = np.random.default_rng(0).integers(1, 255, (64, 64, 32, 1), dtype=np.uint8)
    figures: dict[str, dict[str, str]] = {}

    def ours(url: str, **options: Any) -> Callable[[], np.ndarray]:
        def read() -> np.ndarray:
            source = open_source(url, **options)
            return source.read((0, 0, 0), source.shape_xyz)

        return read

    def tensorstore(kvstore: Any) -> Callable[[], np.ndarray]:
        spec = {"driver": "neuroglancer_precomputed", "kvstore": kvstore}
        return lambda: ts.open(spec).result().read().result()

    _volume(f"{root}/gz", data, None)
    figures["local chunks stored as .gz"] = {
        "shardwright": _outcome(ours(f"{root}/gz"), data),
        "tensorstore": _outcome(tensorstore(f"file://{root}/gz/"), data),
        "cloudvolume": _outcome(lambda: CloudVolume(f"file://{root}/gz")[:, :, :], data),
    }

    _volume(f"{root}/hole", data, False)
    os.remove(f"{root}/hole/4_4_40/0-32_0-32_0-16")
    figures["one chunk absent"] = {
        "shardwright": _outcome(ours(f"{root}/hole"), data),
        "tensorstore": _outcome(tensorstore(f"file://{root}/hole/"), data),
        "cloudvolume": _outcome(lambda: CloudVolume(f"file://{root}/hole")[:, :, :], data),
    }

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="peers")
    _volume(f"{root}/plain", data, False)
    for directory, _, files in os.walk(f"{root}/plain"):
        for name in files:
            path = os.path.join(directory, name)
            key = "v/" + os.path.relpath(path, f"{root}/plain")
            body = open(path, "rb").read()  # noqa: SIM115
            if name == "info":
                client.put_object(Bucket="peers", Key=key, Body=body)
            else:
                client.put_object(Bucket="peers", Key=key, Body=gzip.compress(body),
                                  ContentEncoding="gzip")  # fmt: skip
    kvstore = {"driver": "s3", "bucket": "peers", "path": "v/", "endpoint": endpoint,
               "aws_region": "us-east-1"}  # fmt: skip
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    figures["S3 objects with Content-Encoding: gzip"] = {
        "shardwright": _outcome(ours("s3://peers/v", storage_options=options), data),
        "tensorstore": _outcome(tensorstore(kvstore), data),
    }
    server.stop()

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held: list[Any] = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in iter(int, 1)],
                     daemon=True).start()  # fmt: skip
    quiet = f"http://127.0.0.1:{silent.getsockname()[1]}"
    figures["S3 endpoint that never answers"] = {
        "shardwright": _outcome(
            ours("s3://peers/v", storage_options={"client_kwargs": {"endpoint_url": quiet}})
        ),
        "tensorstore": _outcome(tensorstore({**kvstore, "endpoint": quiet})),
        "cloudvolume (https endpoint)": _outcome(lambda: CloudVolume(f"{quiet}/v")),
    }
    for case, rows in figures.items():
        print(case, rows, flush=True)
    out = write_result("peers_on_field_sources", figures, ("tensorstore", "cloud-volume"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
