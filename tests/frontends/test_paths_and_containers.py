"""Where a job may write, as a user names places: never inside the group around the array it
reads (an OME-Zarr or N5 group, the store a TensorStore spec names), never over files the demo
did not write, and local folder names holding `#` or `?` taken as the paths they are."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tensorstore as ts
import zarr

from shardwright import api, cli
from shardwright.cli.demo import MARKER
from shardwright.errors import DestinationError
from tests.support import volumes

RUN = dict(scheduler="sync", progress=False, chunk_size=(16, 16, 8))


def _ome_group(path: pathlib.Path, zyx: np.ndarray) -> None:
    """An OME-Zarr 0.4 group as zarr-python writes it: array `0` and its multiscales."""
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("0", shape=zyx.shape, chunks=(8, 8, 8), dtype=zyx.dtype)[:] = zyx
    axes = [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"]
    scale = [{"type": "scale", "scale": [40.0, 4.0, 4.0]}]
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": axes,
            "datasets": [{"path": "0", "coordinateTransformations": scale}],
        }  # fmt: skip
    ]


def test_no_destination_inside_the_group_around_the_source(tmp_path: pathlib.Path) -> None:
    zyx = volumes.noise((16, 24, 32), seed=2)
    _ome_group(tmp_path / "em.ome.zarr", zyx)
    for dest in ("em.ome.zarr/sharded", "em.ome.zarr/0/sharded"):
        with pytest.raises(DestinationError, match="lies inside the source"):
            api.convert(str(tmp_path / "em.ome.zarr"), str(tmp_path / dest), **RUN)
    assert sorted(p.name for p in (tmp_path / "em.ome.zarr").iterdir()) == [
        ".zattrs",
        ".zgroup",
        "0",
    ]
    api.convert(str(tmp_path / "em.ome.zarr"), str(tmp_path / "em-sharded"), **RUN)
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/em-sharded/"}
    got = np.asarray(ts.open(spec).result().read().result())[..., 0].transpose(2, 1, 0)
    np.testing.assert_array_equal(got, zyx)


def test_local_names_with_hash_and_question_marks(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "run#2?final"
    folder.mkdir()
    zyx = volumes.noise((16, 24, 32), seed=3)
    array = zarr.create_array(str(folder / "em#1.zarr"), shape=zyx.shape, chunks=(8, 8, 8),
                              dtype="uint8")  # fmt: skip
    array[:] = zyx
    np.save(folder / "em?.npy", zyx)
    for source, dest in (("em#1.zarr", "out#1"), ("em?.npy", "out?2")):
        code = cli.main(["convert", str(folder / source), str(folder / dest), "--resolution",
                         "4,4,40", "--scheduler", "sync", "--quiet"])  # fmt: skip
        assert code == 0
        assert (folder / dest / "info").is_file()
        assert cli.main(["verify", str(folder / dest), "--against", str(folder / source),
                         "--full"]) == 0  # fmt: skip
    # The destination check still knows the folder: not inside the source, not around it.
    with pytest.raises(DestinationError, match="lies inside the source"):
        api.convert(str(folder / "em#1.zarr"), str(folder / "em#1.zarr" / "out"), **RUN)


def test_demo_writes_only_where_it_wrote_before(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("a user's file")
    assert cli.main(["demo", "--out", str(mine)]) == 2
    assert "is a file" in capsys.readouterr().err and mine.read_text() == "a user's file"
    busy = tmp_path / "busy"
    (busy / "source").mkdir(parents=True)
    (busy / "source" / "image.npy").write_text("not the demo's")
    assert cli.main(["demo", "--out", str(busy)]) == 2
    assert "holds files the demo did not write" in capsys.readouterr().err
    assert (busy / "source" / "image.npy").read_text() == "not the demo's"
    assert not (busy / MARKER).exists()
