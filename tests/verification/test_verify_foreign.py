"""`verify` of sharded datasets shardwright did not write: TensorStore's precomputed and zarr3,
zarr-python's zarr3. No manifest: what the format defines is checked, said as such, and
passes; a flipped byte, a stray object or a lost shard is found and named."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorstore as ts
import zarr

from shardwright import api
from shardwright.verification.foreign import NOTE


def _voxels() -> np.ndarray:
    """Blocky labels [x, y, z] that do not fill whole chunks at the far edges."""
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 200, (12, 10, 8)).repeat(4, 0).repeat(4, 1).repeat(4, 2)
    return blocks.astype(np.uint8)[:45, :37, :30]


@pytest.fixture
def source(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "source.npy"
    np.save(path, _voxels().transpose(2, 1, 0))  # z, y, x
    return path


def _tensorstore_precomputed(dest: pathlib.Path) -> None:
    scale = {
        "size": [45, 37, 30], "resolution": [4, 4, 30], "chunk_size": [16, 8, 4],
        "encoding": "raw",
        "sharding": {
            "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 2, "hash": "identity",
            "minishard_bits": 1, "shard_bits": 3, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip",
        },
    }  # fmt: skip
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": f"{dest}/"},
            "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
            "scale_metadata": scale,
            "create": True,
        }
    ).result()
    store.write(_voxels()[..., np.newaxis]).result()


def _tensorstore_zarr3(dest: pathlib.Path) -> None:
    inner = [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}]
    index = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
    store = ts.open(
        {
            "driver": "zarr3", "kvstore": f"file://{dest}/", "create": True,
            "metadata": {
                "shape": [30, 37, 45], "data_type": "uint8", "dimension_names": ["z", "y", "x"],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16, 16]}},
                "codecs": [{"name": "sharding_indexed", "configuration": {
                    "chunk_shape": [4, 8, 8], "codecs": inner, "index_codecs": index,
                }}],
            },
        }
    ).result()  # fmt: skip
    store.write(_voxels().transpose(2, 1, 0)).result()


def _zarr_python(dest: pathlib.Path) -> None:
    array = zarr.create_array(
        str(dest), shape=(30, 37, 45), chunks=(4, 8, 8), shards=(16, 16, 16), dtype="uint8",
        dimension_names=("z", "y", "x"),
    )  # fmt: skip
    array[...] = _voxels().transpose(2, 1, 0)


WRITERS = {
    "tensorstore-precomputed": (_tensorstore_precomputed, "precomputed", "4_4_30/"),
    "tensorstore-zarr3": (_tensorstore_zarr3, "zarr3", "c/"),
    "zarr-python-zarr3": (_zarr_python, "zarr3", "c/"),
}


def _shards(dest: pathlib.Path, prefix: str) -> list[pathlib.Path]:
    return sorted(p for p in (dest / prefix).rglob("*") if p.is_file())


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_foreign_dataset_passes_the_checks_its_format_defines(
    tmp_path: pathlib.Path, source: pathlib.Path, writer: str
) -> None:
    write, fmt, prefix = WRITERS[writer]
    dest = tmp_path / "dataset"
    write(dest)
    shards = _shards(dest, prefix)
    report = api.verify(str(dest), full=True)
    assert report.ok, report.summary()
    assert report.format == fmt and NOTE in report.notes
    assert report.shards_checked == len(shards) > 1
    assert report.chunks_decoded == 3 * 5 * 8 if fmt == "precomputed" else 8 * 5 * 6
    compared = api.verify(str(dest), str(source), full=True)
    assert compared.ok, compared.summary()
    assert compared.chunks_compared == compared.chunks_decoded == report.chunks_decoded
    run = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "verify", str(dest), "--against", str(source)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"({fmt}): OK" in run.stdout and f"note: {NOTE}" in run.stdout


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_flipped_byte_in_a_foreign_shard_fails_naming_the_shard(
    tmp_path: pathlib.Path, writer: str
) -> None:
    write, _, prefix = WRITERS[writer]
    dest = tmp_path / "dataset"
    write(dest)
    for shard in _shards(dest, prefix):  # a run of bytes flipped in every shard's middle
        data = bytearray(shard.read_bytes())
        middle = len(data) // 2
        data[middle - 8 : middle + 8] = bytes(b ^ 0x5A for b in data[middle - 8 : middle + 8])
        shard.write_bytes(bytes(data))
    report = api.verify(str(dest), full=True)
    assert not report.ok
    for shard in _shards(dest, prefix):
        key = shard.relative_to(dest).as_posix()
        assert any(key in problem for problem in report.problems), (key, report.problems)
    run = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "verify", str(dest), "--full"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 1 and "FAILED" in run.stdout


def test_a_stray_object_is_a_problem_and_a_shard_never_written_a_note(
    tmp_path: pathlib.Path, source: pathlib.Path
) -> None:
    dest = tmp_path / "dataset"
    _tensorstore_precomputed(dest)
    shards = _shards(dest, "4_4_30/")
    shards[0].unlink()  # never written: readers see the fill value there
    (dest / "4_4_30" / "notes.txt").write_text("not a shard")
    report = api.verify(str(dest))
    assert report.problems == [
        "4_4_30/notes.txt: stored where the shards live, but no shard of this dataset's geometry"
    ]
    assert f"1 of the {len(shards)} shards of the geometry are not stored" in " ".join(report.notes)
    # Against the source, the lost shard's chunks read as 0 where the source has data.
    compared = api.verify(str(dest), str(source), full=True)
    lost = [p for p in compared.problems if f"shard 4_4_30/{shards[0].name})" in p]
    assert lost and all(p.endswith("missing from the output") for p in lost)


def test_a_folder_of_other_files_is_still_no_dataset(tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    report = api.verify(str(tmp_path))
    assert not report.ok and "no info or zarr.json: not a dataset" in report.problems[0]
    assert NOTE not in report.notes


def test_foreign_metadata_that_describes_no_dataset_is_one_problem(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "info").write_text('{"@type": "neuroglancer_multiscale_volume", "scales": 3}')
    report = api.verify(str(tmp_path))
    assert not report.ok and NOTE in report.notes
    assert report.problems[0].startswith("the metadata does not describe a dataset")
