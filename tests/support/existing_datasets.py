"""Segmentations as other tools leave them in a lab's bucket, for the tests that add to them
in place: TensorStore's sharded precomputed (CloudVolume's unsharded one is
`label_shapes.write_precomputed`), and what every object of a dataset holds, to prove that
an addition changed none of them."""

from __future__ import annotations

import pathlib
from typing import Any

import crc32c
import numpy as np

from shardwright.stores import Store, open_store
from tests.support import label_shapes


def write_tensorstore_sharded(path: pathlib.Path, volume: np.ndarray | None = None) -> str:
    """`volume` (default `label_shapes.labels()`, indexed x, y, z) as a sharded precomputed
    segmentation written by TensorStore (compressed_segmentation chunks, gzip indexes)."""
    import tensorstore as ts

    data = label_shapes.labels() if volume is None else volume
    spec: dict[str, Any] = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(path)},
        "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
        "scale_metadata": {
            "size": list(data.shape),
            "resolution": list(label_shapes.RESOLUTION),
            "encoding": "compressed_segmentation",
            "compressed_segmentation_block_size": [8, 8, 8],
            "chunk_size": [32, 32, 32],
            "sharding": {
                "@type": "neuroglancer_uint64_sharded_v1",
                "hash": "identity",
                "preshift_bits": 3,
                "minishard_bits": 1,
                "shard_bits": 1,
                "minishard_index_encoding": "gzip",
                "data_encoding": "gzip",
            },
        },
        "create": True,
    }
    array = ts.open(spec).result()
    array[...] = data[..., np.newaxis]
    return str(path)


def copied(
    source: str,
    dest: str,
    source_options: dict[str, Any] | None = None,
    dest_options: dict[str, Any] | None = None,
) -> Store:
    """Every object below `source` written below `dest` (a dataset put in a test server's
    bucket, as a lab's is already there, or read back out of it); `dest`'s store."""
    origin, target = open_store(source, source_options), open_store(dest, dest_options)
    for key in origin.list_keys():
        target.write_object(key, origin.read(key))
    return target


def object_crc32cs(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, int]:
    """Every object below `url` (a path or URL) by key, with its crc32c."""
    store = open_store(url, storage_options)
    return {key: crc32c.crc32c(store.read(key)) for key in store.list_keys()}


def kept(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The objects of `before` that `after` lacks or holds other bytes in (none: kept)."""
    return sorted(key for key, crc in before.items() if after.get(key) != crc)
