"""Reading precomputed sources as the field stores them: shardwright's reader against
TensorStore and CloudVolume on the same volumes, and against this machine's limit for the work
(reading the stored bytes; and undoing their gzip and encoding with the codec alone), in the
same run.

Volumes, written by CloudVolume itself (64^3 chunks; EM-like uint8 image, uint64 labels):
- `raw-gz`: raw image, every chunk a `.gz` file (CloudVolume's default on local disk);
- `raw-plain`: the same, stored plain;
- `raw-sharded`: the same image sharded (written by TensorStore: gzip data encoding);
- `cseg-gz`: compressed_segmentation labels, `.gz` files.

Each tool reads the whole volume in boxes of 256 x 256 x 64 voxels (the box a shard task's
epoch reads) in one thread; TensorStore with its own thread pool, as it runs. TensorStore
reads no `.gz` volume: its row records that it returned zeros. Results go to
`results/sources-DATE.json`; `--quick` for a smoke run.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import best_of, write_result  # noqa: E402

CHUNK = (64, 64, 64)
BOX = (256, 256, 64)


def _em_like(size: tuple[int, int, int]) -> np.ndarray:
    x, y, z = size
    rng = np.random.default_rng(0)
    xx, yy = np.meshgrid(np.arange(x), np.arange(y), indexing="ij")
    planes = [
        np.clip(
            120 + 40 * np.sin(xx / 9 + k / 5) * np.cos(yy / 11) + rng.normal(0, 8, (x, y)), 0, 255
        ).astype(np.uint8)  # fmt: skip
        for k in range(z)
    ]
    return np.stack(planes, axis=2)[..., np.newaxis]


def _labels(size: tuple[int, int, int]) -> np.ndarray:
    x, y, z = np.meshgrid(*(np.arange(n) for n in size), indexing="ij")
    cells = (x // 23) + 1000 * (y // 19) + 1000000 * (z // 7)
    return (cells.astype(np.uint64) + 2**40)[..., np.newaxis]


def _write(root: str, size: tuple[int, int, int]) -> dict[str, np.ndarray]:
    import tensorstore as ts
    from cloudvolume import CloudVolume

    image, labels = _em_like(size), _labels(size)

    def info(layer: str, dtype: str, encoding: str) -> dict[str, Any]:
        return CloudVolume.create_new_info(
            num_channels=1, layer_type=layer, data_type=dtype, encoding=encoding,
            resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=list(CHUNK),
            volume_size=list(size),
        )  # fmt: skip

    for name, data, meta, compress in (
        ("raw-gz", image, info("image", "uint8", "raw"), None),
        ("raw-plain", image, info("image", "uint8", "raw"), False),
        ("cseg-gz", labels, info("segmentation", "uint64", "compressed_segmentation"), None),
    ):
        cv = CloudVolume(f"file://{root}/{name}", info=meta, compress=compress, progress=False)
        cv.commit_info()
        cv[:, :, :] = data
    ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{root}/raw-sharded/",
            "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
            "scale_metadata": {
                "size": list(size), "resolution": [4, 4, 40], "chunk_size": list(CHUNK),
                "encoding": "raw",
                "sharding": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 6,
                             "hash": "identity", "minishard_bits": 3, "shard_bits": 12,
                             "minishard_index_encoding": "gzip", "data_encoding": "gzip"},
            },
            "create": True,
        }
    ).result().write(image).result()  # fmt: skip
    return {"raw-gz": image, "raw-plain": image, "raw-sharded": image, "cseg-gz": labels}


def _boxes(size: tuple[int, int, int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [
        ((x, y, z), tuple(min(a + b, s) for a, b, s in zip((x, y, z), BOX, size, strict=True)))
        for z in range(0, size[2], BOX[2])
        for y in range(0, size[1], BOX[1])
        for x in range(0, size[0], BOX[0])
    ]


def _readers(path: str, size: tuple[int, int, int]) -> dict[str, Callable[[], list[Any]]]:
    """Each tool reading the whole volume box by box, each box in the tool's own layout (no
    copy into one array: that copy would favour the tool whose layout it shares)."""
    import tensorstore as ts
    from cloudvolume import CloudVolume

    from shardwright.sources import open_source

    boxes = _boxes(size)
    ours = open_source(path)
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/"},
                    read=True).result()  # fmt: skip
    cv = CloudVolume(f"file://{path}", progress=False, parallel=1, fill_missing=True)

    def slab(lo: tuple[int, ...], hi: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))

    return {
        "shardwright": lambda: [ours.read(lo, hi) for lo, hi in boxes],
        "tensorstore": lambda: [store[slab(lo, hi)].read().result() for lo, hi in boxes],
        "cloudvolume": lambda: [cv[slab(lo, hi)] for lo, hi in boxes],
    }


def _exact(blocks: list[Any], want: np.ndarray, size: tuple[int, int, int]) -> bool:
    return all(
        np.array_equal(np.asarray(block), want[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]])
        for block, (lo, hi) in zip(blocks, _boxes(size), strict=True)
    )


def _limit(path: str, name: str) -> dict[str, Callable[[], Any]]:
    """This machine's limit for the work, in one thread: reading every stored byte of the
    scale (the page cache's copy), and that plus undoing gzip (ISA-L) and the encoding with
    the codec alone, chunk by chunk."""
    from isal import isal_zlib

    from shardwright.codecs import chunk_encoding

    files = sorted(glob.glob(f"{path}/4_4_40/*"))

    def read_all() -> int:
        total = 0
        for file in files:
            with open(file, "rb") as f:
                total += len(f.read())
        return total

    limits: dict[str, Callable[[], Any]] = {"file_read": read_all}
    if name.endswith("-gz"):
        encoding = chunk_encoding("compressed_segmentation", block_size=(8, 8, 8)) if (
            name.startswith("cseg")) else None  # fmt: skip
        dtype = np.uint64 if encoding else np.uint8

        def decode_all() -> None:
            for file in files:
                with open(file, "rb") as f:
                    data = isal_zlib.decompress(f.read(), wbits=31)
                if encoding is not None:
                    encoding.decode(data, (*CHUNK, 1), dtype)

        limits["read_and_decode"] = decode_all
    return limits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small volume, one round")
    args = parser.parse_args()
    size = (256, 256, 128) if args.quick else (1024, 1024, 128)
    rounds = 1 if args.quick else 3
    root = tempfile.mkdtemp(prefix="bench-sources-")
    figures: dict[str, Any] = {"size_xyz": list(size), "chunk_xyz": list(CHUNK),
                               "box_xyz": list(BOX), "cases": {}}  # fmt: skip
    try:
        expected = _write(root, size)
        for name, want in expected.items():
            path = f"{root}/{name}"
            row: dict[str, Any] = {"voxel_bytes": int(want.nbytes)}
            for tool, read in _readers(path, size).items():
                got = read()
                row[tool] = {
                    "seconds": round(best_of(read, rounds), 4),
                    "exact": _exact(got, want, size),
                    "all_zero": not any(np.asarray(block).any() for block in got),
                }
                del got
            for limit, work in _limit(path, name).items():
                row[limit] = {"seconds": round(best_of(work, rounds), 4)}
            ours = row["shardwright"]["seconds"]
            row["ratios"] = {
                f"shardwright_vs_{k}": round(row[k]["seconds"] / ours, 3)
                for k in ("tensorstore", "cloudvolume", "file_read", "read_and_decode")
                if k in row and (k not in ("tensorstore", "cloudvolume") or row[k]["exact"])
            }
            row["shardwright_mb_per_s"] = round(want.nbytes / ours / 1e6, 1)
            figures["cases"][name] = row
            print(name, {k: v for k, v in row.items() if k != "voxel_bytes"}, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures["note"] = (
        "ratios are the other's seconds over shardwright's (above 1: shardwright is faster; "
        "for a limit, the fraction of the limit's speed shardwright reaches); one thread, "
        "TensorStore with its own pool"
    )
    out = write_result("sources", figures, ("tensorstore", "cloud-volume", "isal", "numpy"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
