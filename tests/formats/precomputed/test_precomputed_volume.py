"""Whole sharded precomputed volumes assembled from our shards, opened by TensorStore and
CloudVolume: proves chunk ids (Morton codes), edge truncation, encodings and `info` together."""

from __future__ import annotations

import itertools
import json
import pathlib

import numpy as np
import pytest
import tensorstore as ts
from cloudvolume import CloudVolume

from shardwright.codecs import chunk_encoding
from shardwright.errors import EncodingError
from shardwright.precomputed import (
    InfoError,
    PrecomputedInfo,
    PrecomputedScale,
    ShardingSpec,
)
from tests.support import volumes


def write_sharded_volume(
    root: pathlib.Path, volume_xyzc: np.ndarray, info: PrecomputedInfo
) -> dict[str, bytes]:
    """Encode every chunk of scale 0 and write its shards, the way the pipeline will."""
    scale = info.scales[0]
    assert scale.sharding is not None
    options = {}
    if scale.compressed_segmentation_block_size is not None:
        options["block_size"] = scale.compressed_segmentation_block_size
    encoding = chunk_encoding(scale.encoding, **options)
    items: dict[int, bytes] = {}
    grid = scale.grid_shape
    coords = np.array(list(itertools.product(*(range(n) for n in grid))))
    ids = scale.chunk_ids(coords)
    for coord, chunk_id in zip(coords.tolist(), ids.tolist(), strict=True):
        start, stop = scale.chunk_bounds(coord)
        chunk = volume_xyzc[start[0] : stop[0], start[1] : stop[1], start[2] : stop[2], :]
        items[chunk_id] = encoding.encode(chunk)
    files = scale.sharding.encode_shards(items)
    (root / scale.key).mkdir(parents=True)
    for name, data in files.items():
        (root / scale.key / name).write_bytes(data)
    (root / "info").write_text(json.dumps(info.to_json()))
    return files


CASES = [
    # dtype, channels, layer, encoding, block, size xyz, chunk xyz, sharding
    (
        "uint8",
        1,
        "image",
        "raw",
        None,
        (37, 29, 11),
        (8, 8, 4),
        ShardingSpec(preshift_bits=3, minishard_bits=2, shard_bits=3, data_encoding="gzip"),
    ),
    (
        "uint16",
        2,
        "image",
        "raw",
        None,
        (20, 17, 9),
        (8, 4, 4),
        ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=2),
    ),
    (
        "float32",
        1,
        "image",
        "raw",
        None,
        (16, 16, 16),
        (16, 8, 4),
        ShardingSpec(
            hash="murmurhash3_x86_128",
            minishard_bits=1,
            shard_bits=2,
            minishard_index_encoding="gzip",
        ),
    ),
    (
        "uint32",
        1,
        "segmentation",
        "compressed_segmentation",
        (8, 8, 8),
        (33, 21, 18),
        (16, 16, 8),
        ShardingSpec(preshift_bits=2, minishard_bits=1, shard_bits=2, data_encoding="gzip"),
    ),
    (
        "uint64",
        1,
        "segmentation",
        "compressed_segmentation",
        (4, 8, 2),
        (40, 24, 10),
        (16, 8, 4),
        ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=3),
    ),
    (
        "uint8",
        1,
        "image",
        "png",
        None,
        (30, 22, 7),
        (16, 16, 4),
        ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=1),
    ),
    (
        "uint8",
        1,
        "image",
        "jpeg",
        None,
        (30, 20, 9),
        (16, 16, 4),
        ShardingSpec(minishard_bits=1, shard_bits=2),
    ),
    (
        "uint32",
        2,
        "image",
        "compressed_segmentation",
        (4, 4, 4),
        (21, 18, 10),
        (8, 8, 8),
        ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=2),
    ),
    (
        "uint8",
        3,
        "image",
        "jpeg",
        None,
        (32, 24, 8),
        (16, 16, 4),
        ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=1),
    ),
]


_volume = volumes.layer_xyzc


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[3]}-{c[7].hash}" for c in CASES])
def test_sharded_volume_reads_back_in_tensorstore_and_cloudvolume(
    tmp_path: pathlib.Path, case: tuple
) -> None:
    dtype, channels, layer, encoding, block, size, chunk, sharding = case
    info = PrecomputedInfo(
        type=layer,
        data_type=dtype,
        num_channels=channels,
        scales=(
            PrecomputedScale(
                key="8_8_40",
                size=size,
                resolution=(8, 8, 40),
                chunk_size=chunk,
                encoding=encoding,
                voxel_offset=(5, -3, 2),
                compressed_segmentation_block_size=block,
                sharding=sharding,
            ),
        ),
    )
    volume = _volume(dtype, channels, layer, size)
    write_sharded_volume(tmp_path, volume, info)

    store = ts.open(
        {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/"}
    ).result()
    assert store.domain.origin[:3] == (5, -3, 2)
    via_tensorstore = store.read().result()
    cv = CloudVolume(f"file://{tmp_path}", mip=0, progress=False, fill_missing=False)
    via_cloudvolume = np.asarray(cv[:, :, :, :])

    readers = [("tensorstore", via_tensorstore), ("cloudvolume", via_cloudvolume)]
    if encoding == "jpeg" and channels == 3:
        # CloudVolume reads a 3-channel jpeg's interleaved RGB bytes as planar channels, unlike
        # Neuroglancer and TensorStore (which wrote the layout we follow); TensorStore decides.
        readers = readers[:1]
    for reader, got in readers:
        assert got.shape == volume.shape, reader
        if encoding == "jpeg":
            error = np.abs(got.astype(np.int16) - volume.astype(np.int16))
            assert error.mean() < 3.0, reader
        else:
            np.testing.assert_array_equal(got, volume)


def test_info_round_trip() -> None:
    scale = PrecomputedScale(
        key="4_4_40",
        size=(100, 80, 30),
        resolution=(4, 4, 40.5),
        chunk_size=(64, 64, 16),
        encoding="compressed_segmentation",
        compressed_segmentation_block_size=(8, 8, 8),
        sharding=ShardingSpec(preshift_bits=6, minishard_bits=3),
    )
    info = PrecomputedInfo(
        type="segmentation",
        data_type="uint64",
        num_channels=1,
        scales=(scale,),
        mesh="mesh",
        extra={"segment_properties": "props"},
    )
    obj = info.to_json()
    assert PrecomputedInfo.from_json(json.loads(json.dumps(obj))) == info
    assert obj["scales"][0]["chunk_sizes"] == [[64, 64, 16]]
    assert scale.grid_shape == (2, 2, 2)
    assert scale.chunk_name((1, 1, 1)) == "64-100_64-80_16-30"


def _info(**scale_changes: object) -> dict:
    scale = {
        "key": "s0",
        "size": [10, 10, 10],
        "resolution": [1, 1, 1],
        "chunk_sizes": [[4, 4, 4]],
        "encoding": "raw",
    }
    scale.update(scale_changes)  # type: ignore[arg-type]
    return {"type": "image", "data_type": "uint8", "num_channels": 1, "scales": [scale]}


@pytest.mark.parametrize(
    ("info", "error", "message"),
    [
        (
            {**_info(), "data_type": "uint64", "scales": [_info(encoding="jpeg")["scales"][0]]},
            EncodingError,
            "jpeg",
        ),
        (
            {
                **_info(),
                "data_type": "float32",
                "scales": [
                    _info(
                        encoding="compressed_segmentation",
                        compressed_segmentation_block_size=[8, 8, 8],
                    )["scales"][0]
                ],
            },
            EncodingError,
            "compressed_segmentation",
        ),
        (
            _info(encoding="compressed_segmentation"),
            InfoError,
            "compressed_segmentation_block_size",
        ),
        (_info(key="../../elsewhere"), InfoError, "escapes the dataset root"),
        (_info(key="/abs/path"), InfoError, "escapes the dataset root"),
        (
            _info(chunk_sizes=[[4, 4, 4], [8, 8, 8]], sharding=ShardingSpec().to_json()),
            InfoError,
            "exactly one chunk size",
        ),
        (_info(size=[10, 0, 10]), InfoError, "size must be positive"),
        ({**_info(), "type": "volume"}, InfoError, "type must be one of"),
        ({**_info(), "data_type": "complex64"}, InfoError, "data_type must be one of"),
        ({**_info(), "type": "segmentation", "num_channels": 2}, InfoError, "1 channel"),
        (_info(encoding="webp"), EncodingError, "webp"),
    ],
)
def test_bad_info_raises_one_clear_error(info: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        PrecomputedInfo.from_json(info)


def test_relative_key_inside_the_root_is_allowed() -> None:
    assert PrecomputedInfo.from_json(_info(key="a/../b")).scales[0].key == "a/../b"
