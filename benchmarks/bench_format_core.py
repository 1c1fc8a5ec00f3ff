"""Micro-benchmarks of the format core, each against a peer in the same run.

1. hash + compressed Morton code of 10^6 chunk ids: ours (vectorized) vs `mmh3` called per id.
2. assembly of one shard of 10^4 chunks: our ShardBuilder vs TensorStore's sharded kvstore
   writer (one transaction) and CloudVolume's `synthesize_shard_files`.
3. gzip of EM-like 64^3 uint8 chunks: isal (our gzip codec) vs zlib at the same ratio class.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import zlib

import mmh3
import numpy as np
import tensorstore as ts
from cloudvolume.datasource.precomputed.sharding import ShardingSpecification

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import best_of, write_result  # noqa: E402

from shardwright.codecs import byte_codec  # noqa: E402
from shardwright.precomputed import ShardingSpec, compressed_morton_code  # noqa: E402


def bench_hash_and_morton(n: int) -> dict[str, float]:
    side = round(n ** (1 / 3))
    grid = (side, side, side)
    coords = np.stack(np.unravel_index(np.arange(side**3), grid), axis=1)
    spec = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=6, shard_bits=10)
    ids = compressed_morton_code(coords, grid)
    id_list = ids.tolist()

    def peer() -> None:
        for chunk_id in id_list:
            mmh3.hash64(chunk_id.to_bytes(8, "little"), 0, x64arch=False, signed=False)

    t_morton = best_of(lambda: compressed_morton_code(coords, grid))
    t_hash = best_of(lambda: spec.locate(ids))
    t_both = best_of(lambda: spec.locate(compressed_morton_code(coords, grid)))
    t_peer = best_of(peer, 1)
    return {
        "ids": len(coords),
        "morton_ids_per_s": len(coords) / t_morton,
        "hash_and_locate_ids_per_s": len(coords) / t_hash,
        "morton_hash_locate_ids_per_s": len(coords) / t_both,
        "mmh3_python_loop_ids_per_s": len(coords) / t_peer,
        "hash_speedup_vs_mmh3_loop": t_peer / t_hash,
    }


def bench_shard_assembly(n_chunks: int, chunk_bytes: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    payload = rng.integers(0, 256, chunk_bytes, dtype=np.uint8).tobytes()
    items = {i: payload for i in range(n_chunks)}
    spec = ShardingSpec(preshift_bits=0, minishard_bits=6, shard_bits=0)

    def ours() -> None:
        builder = spec.builder(0)
        builder.add_many(np.arange(n_chunks, dtype=np.uint64), [payload] * n_chunks)
        shard = builder.finish()
        with tempfile.TemporaryFile() as out:
            shard.write_to(out)
        shard.close()

    def tensorstore_writer() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            kv = ts.KvStore.open(
                {
                    "driver": "neuroglancer_uint64_sharded",
                    "base": f"file://{tmp}/",
                    "metadata": spec.to_json(),
                }
            ).result()
            txn = ts.Transaction()
            for chunk_id in range(n_chunks):
                kv.with_transaction(txn).write(chunk_id.to_bytes(8, "big"), payload)
            txn.commit_async().result()

    cv_spec = ShardingSpecification.from_dict(spec.to_json())

    def cloudvolume_writer() -> None:
        files = cv_spec.synthesize_shards(items, progress=False)
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in files.items():
                pathlib.Path(tmp, name).write_bytes(data)

    t_ours = best_of(ours)
    t_ts = best_of(tensorstore_writer)
    t_cv = best_of(cloudvolume_writer)
    return {
        "chunks": n_chunks,
        "chunk_bytes": chunk_bytes,
        "ours_s": t_ours,
        "tensorstore_s": t_ts,
        "cloudvolume_s": t_cv,
        "ratio_tensorstore_over_ours": t_ts / t_ours,
        "ratio_cloudvolume_over_ours": t_cv / t_ours,
    }


def em_like_chunk(rng: np.random.Generator, side: int = 64) -> bytes:
    """Smooth structure plus noise: compresses like EM imagery (ratio ~1.1-1.5), unlike zeros."""
    x, y, z = np.meshgrid(*(np.arange(side),) * 3, indexing="ij")
    base = 128 + 50 * np.sin(x / 5.0) * np.cos(y / 7.0) + 20 * np.sin(z / 3.0)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8).tobytes()


def bench_gzip(n_chunks: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    chunks = [em_like_chunk(rng) for _ in range(n_chunks)]
    total = sum(len(c) for c in chunks)
    codec = byte_codec("gzip")
    assert codec is not None
    figures: dict[str, float] = {"input_mb": total / 1e6}
    t_isal = best_of(lambda: [codec.compress(c) for c in chunks])
    isal_size = sum(len(codec.compress(c)) for c in chunks)
    figures["isal_mb_per_s"] = total / t_isal / 1e6
    figures["isal_ratio"] = total / isal_size
    for level in (1, 6):
        t = best_of(lambda level=level: [zlib.compress(c, level) for c in chunks])
        size = sum(len(zlib.compress(c, level)) for c in chunks)
        figures[f"zlib{level}_mb_per_s"] = total / t / 1e6
        figures[f"zlib{level}_ratio"] = total / size
        figures[f"speedup_isal_vs_zlib{level}"] = t / t_isal
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    ids, chunks, gz = (10**5, 10**3, 4) if args.quick else (10**6, 10**4, 32)
    figures = {
        "hash_and_morton": bench_hash_and_morton(ids),
        "shard_assembly": bench_shard_assembly(chunks, 4096),
        "gzip": bench_gzip(gz),
    }
    name = "format_core-quick" if args.quick else "format_core"
    path = write_result(name, figures, ("numpy", "mmh3", "isal", "tensorstore", "cloud-volume"))
    for section, values in figures.items():
        print(section)
        for key, value in values.items():
            print(f"  {key:32s} {value:,.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
