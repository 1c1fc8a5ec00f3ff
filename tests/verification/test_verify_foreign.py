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
    assert not report.ok
    assert "no info, zarr.json or Zarr v2 group: not a dataset" in report.problems[0]
    assert NOTE not in report.notes


def test_foreign_metadata_that_describes_no_dataset_is_one_problem(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "info").write_text('{"@type": "neuroglancer_multiscale_volume", "scales": 3}')
    report = api.verify(str(tmp_path))
    assert not report.ok and NOTE in report.notes
    assert report.problems[0].startswith("the metadata does not describe a dataset")


# -- placement: whoever wrote the dataset, sharded or not ------------------------------------
OFFSET = (50, 10, 4)  # the source's voxel 0, x,y,z, at 8 x 8 x 40 nm


def _placed_source(path: pathlib.Path) -> pathlib.Path:
    """The voxels as an OME-Zarr 0.5 image (zarr-python, by hand) of 8,8,40 nm at OFFSET."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    array = group.create_array("0", shape=(30, 37, 45), chunks=(30, 37, 45), dtype="uint8")
    array[...] = _voxels().transpose(2, 1, 0)
    group.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [{
            "axes": [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"],
            "datasets": [{"path": "0", "coordinateTransformations": [
                {"type": "scale", "scale": [40, 8, 8]},
                {"type": "translation", "translation": [160, 80, 400]}]}],
        }],
    }  # fmt: skip
    return path


def _tensorstore_placed(dest: pathlib.Path, offset: tuple[int, ...], resolution: list[int]) -> None:
    """TensorStore's sharded precomputed, its scale at `offset` and `resolution`."""
    spec = {
        "driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/", "create": True,
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
        "scale_metadata": {
            "size": [45, 37, 30], "resolution": resolution, "voxel_offset": list(offset),
            "chunk_size": [16, 8, 4], "encoding": "raw",
            "sharding": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 2,
                         "hash": "identity", "minishard_bits": 1, "shard_bits": 3,
                         "minishard_index_encoding": "gzip", "data_encoding": "gzip"},
        },
    }  # fmt: skip
    store = ts.open(spec).result()
    store[ts.d[:].translate_to[0]].write(_voxels()[..., np.newaxis]).result()


def test_a_foreign_dataset_placed_off_its_source_fails(tmp_path: pathlib.Path) -> None:
    """TensorStore's sharded precomputed of the same voxels: at the source's offset and voxel
    size it verifies; one voxel off along x, or at another voxel size, is a problem naming
    both values, though every voxel matches (the command line exits 1)."""
    source = _placed_source(tmp_path / "source.ome.zarr")
    cases = {
        "right": (OFFSET, [8, 8, 40], None),
        "off": ((51, 10, 4), [8, 8, 40], "voxel offset is 51,10,4, expected 50,10,4"),
        "squashed": (OFFSET, [8, 8, 30], "voxel size (nm) is 8,8,30, expected 8,8,40"),
    }
    for name, (offset, resolution, problem) in cases.items():
        dest = tmp_path / name
        _tensorstore_placed(dest, offset, resolution)
        report = api.verify(str(dest), str(source), full=True)
        assert report.chunks_compared == 3 * 5 * 8, name
        if problem is None:
            assert report.ok, report.problems
            continue
        assert [p for p in report.problems if p.startswith("placement")] == [
            f"placement: the output's {problem} (the source's, from OME-Zarr 0.5 dataset '0')"
        ]
        run = subprocess.run(
            [sys.executable, "-m", "shardwright.cli", "verify", str(dest), "--against",
             str(source)], capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert run.returncode == 1 and problem in run.stdout, run.stdout + run.stderr


def test_an_unsharded_cloudvolume_dataset_verifies_against_its_source(
    tmp_path: pathlib.Path,
) -> None:
    """CloudVolume's plain chunk files (no shards): read through shardwright's own reader, its
    placement and every voxel compared with the source's, no traceback; one voxel off, or a
    chunk rewritten with other voxels, is a problem."""
    CloudVolume = pytest.importorskip("cloudvolume").CloudVolume  # noqa: N806
    source = _placed_source(tmp_path / "source.ome.zarr")
    for name, offset in (("right", OFFSET), ("off", (50, 11, 4))):
        info = CloudVolume.create_new_info(
            num_channels=1, layer_type="image", data_type="uint8", encoding="raw",
            resolution=[8, 8, 40], voxel_offset=list(offset), chunk_size=[16, 16, 8],
            volume_size=[45, 37, 30],
        )  # fmt: skip
        volume = CloudVolume(f"file://{tmp_path / name}", info=info, progress=False)
        volume.commit_info()
        volume[volume.bounds.to_slices()] = _voxels()  # CloudVolume's own coordinates
    report = api.verify(str(tmp_path / "right"), str(source), full=True)
    assert report.ok, report.problems
    assert report.chunks_compared == 3 * 3 * 4
    off = api.verify(str(tmp_path / "off"), str(source), full=True)
    assert off.problems == [
        "placement: the output's voxel offset is 50,11,4, expected 50,10,4 (the source's, from "
        "OME-Zarr 0.5 dataset '0')"
    ]
    changed = CloudVolume(f"file://{tmp_path / 'right'}", progress=False)
    changed[50:66, 10:26, 4:12] = np.full((16, 16, 8), 255, np.uint8)  # chunk (0, 0, 0)
    report = api.verify(str(tmp_path / "right"), str(source), full=True)
    assert len(report.problems) == 1 and "chunk (0, 0, 0)" in report.problems[0]
    assert "voxels differ from the source" in report.problems[0]
    alone = api.verify(str(tmp_path / "right"), full=True)  # no source: every box decoded
    assert alone.ok and alone.chunks_decoded == 3 * 3 * 4


def test_a_bare_zarr_array_is_compared_voxel_for_voxel_but_not_placed(
    tmp_path: pathlib.Path, source: pathlib.Path
) -> None:
    """A bare Zarr v3 array (zarr-python's, sharded or in plain chunks) records no voxel size
    or offset: verify against a source compares every voxel and says the placement was not
    compared, never a problem; the plain one is read box by box."""
    _zarr_python(tmp_path / "sharded")
    plain = zarr.create_array(str(tmp_path / "plain"), shape=(30, 37, 45), chunks=(8, 16, 16),
                              dtype="uint8", dimension_names=("z", "y", "x"))  # fmt: skip
    plain[...] = _voxels().transpose(2, 1, 0)
    for name in ("sharded", "plain"):
        report = api.verify(str(tmp_path / name), str(source), full=True)
        assert report.ok, (name, report.problems)
        assert report.chunks_compared > 0
        assert "a bare zarr array records no placement: not compared" in report.notes, name
    assert "not sharded: read through shardwright's own readers, box by box" in report.notes
    plain[29, 36, 44] = 255 - plain[29, 36, 44]  # the last voxel
    changed = api.verify(str(tmp_path / "plain"), str(source), full=True)
    assert len(changed.problems) == 1 and "voxels differ from the source" in changed.problems[0]
