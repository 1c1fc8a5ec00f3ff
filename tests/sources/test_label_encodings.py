"""Precomputed segmentations CloudVolume writes in `compresso` and `crackle`: read as sources
(their packages decode each chunk), converted exactly — TensorStore reads every voxel of the
output equal to the array CloudVolume was given — whether the chunks are stored plain or under
CloudVolume's default `.gz`; an absent chunk refused or filled as any precomputed chunk; the
encodings never written; and, without their package, refused by `plan` in one line naming it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from cloudvolume import CloudVolume

from shardwright import api, cli
from shardwright.codecs import chunk_decoding, chunk_encoding
from shardwright.errors import EncodingError, ShardwrightError, SourceError

SIZE = (64, 56, 30)  # x, y, z: the last chunks along y and z are truncated
CHUNK = (32, 32, 16)
OFFSET = (3, 5, 7)


def _labels(dtype: str) -> np.ndarray:
    """[x, y, z] labels: 8-voxel blocks of random ids (the dtype's largest values among them),
    with single voxels of other ids scattered through."""
    rng = np.random.default_rng(7)
    top = np.iinfo(dtype).max
    ids = rng.integers(0, 40, (8, 7, 4)).astype(dtype)
    ids[ids == 39] = top - 2
    blocks = np.repeat(np.repeat(np.repeat(ids, 8, 0), 8, 1), 8, 2)[: SIZE[0], : SIZE[1], : SIZE[2]]
    specks = rng.random(SIZE) < 0.01
    blocks[specks] = rng.integers(0, 1000, int(specks.sum())).astype(dtype)
    return np.asfortranarray(blocks)


def _write(path: pathlib.Path, encoding: str, dtype: str, compress: Any) -> np.ndarray:
    """An unsharded segmentation written by CloudVolume; returns the [x, y, z] array given."""
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type="segmentation",
        data_type=dtype,
        encoding=encoding,
        resolution=[4, 4, 40],
        voxel_offset=list(OFFSET),
        chunk_size=list(CHUNK),
        volume_size=list(SIZE),
    )
    cv = CloudVolume(f"file://{path}", info=info, compress=compress, progress=False)
    cv.commit_info()
    data = _labels(dtype)
    cv[:, :, :] = data
    return data


def _read_output(dest: pathlib.Path) -> np.ndarray:
    """The converted volume as TensorStore reads it, [x, y, z] (its one channel)."""
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}
    store = ts.open(spec).result()
    return np.asarray(store.translate_to[0, 0, 0, 0].read().result())[..., 0]


CASES = [  # encoding, dtype, CloudVolume's compress, the chunks' suffix
    ("compresso", "uint64", None, ".gz"),  # CloudVolume's default for both: gzip
    ("crackle", "uint64", False, ""),
    ("compresso", "uint32", False, ""),
    ("crackle", "uint32", None, ".gz"),
]


@pytest.mark.parametrize(
    "encoding, dtype, compress, stored",
    CASES,
    ids=[f"{c[0]}-{c[1]}-{c[3] or 'plain'}" for c in CASES],
)
def test_cloudvolume_label_encodings_convert_exactly(
    tmp_path: pathlib.Path, encoding: str, dtype: str, compress: Any, stored: str
) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    data = _write(src, encoding, dtype, compress)
    chunks = list((src / "4_4_40").iterdir())
    assert len(chunks) == 2 * 2 * 2 and {p.suffix for p in chunks} == {stored}
    manifest = api.convert(str(src), str(out), scheduler="sync", progress=False)
    assert manifest.totals.source_chunks_missing == 0
    written = _read_output(out)
    assert written.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(written, data)
    assert (written == np.iinfo(dtype).max - 2).any()  # the top of the range came through
    report = api.verify(str(out), str(src), full=True)  # the source read again, by verify
    assert report.ok, report.summary()


def test_the_cli_converts_a_crackle_volume(tmp_path: pathlib.Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    data = _write(src, "crackle", "uint64", None)
    run = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", str(src), str(out), "--quiet"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(_read_output(out), data)


def test_an_absent_chunk_is_refused_then_filled(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    data = _write(src, "compresso", "uint64", None)
    hole = f"{OFFSET[0] + 32}-{OFFSET[0] + 64}_{OFFSET[1]}-{OFFSET[1] + 32}_" \
           f"{OFFSET[2] + 16}-{OFFSET[2] + 30}"  # fmt: skip
    (src / "4_4_40" / f"{hole}.gz").unlink()
    with pytest.raises(ShardwrightError, match=rf"missing \(4_4_40/{hole}\)"):
        api.convert(str(src), str(tmp_path / "refused"), scheduler="sync", progress=False)
    out = tmp_path / "out"
    manifest = api.convert(str(src), str(out), scheduler="sync", progress=False,
                           fill_missing=True)  # fmt: skip
    assert manifest.totals.source_chunks_missing == 1
    want = data.copy()
    assert want[32:64, 0:32, 16:30].any()
    want[32:64, 0:32, 16:30] = 0
    np.testing.assert_array_equal(_read_output(out), want)


@pytest.mark.parametrize("encoding", ["compresso", "crackle"])
def test_the_encodings_are_never_written(
    tmp_path: pathlib.Path, encoding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    _write(src, encoding, "uint32", False)
    with pytest.raises(EncodingError, match=f"'{encoding}' is read from sources, never written"):
        api.plan(str(src), str(tmp_path / "out"), encoding=encoding)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["convert", str(src), str(tmp_path / "out"), "--encoding", encoding])
    assert exit_.value.code == 2
    assert f"invalid choice: '{encoding}'" in capsys.readouterr().err
    with pytest.raises(EncodingError, match="never written"):
        chunk_decoding(encoding).encode(np.zeros((4, 4, 4, 1), np.uint32))
    with pytest.raises(EncodingError, match="read from sources"):
        chunk_encoding(encoding)
    assert not (tmp_path / "out").exists()


def test_a_stream_of_another_shape_is_refused() -> None:
    import compresso

    stream = compresso.compress(np.ones((4, 4, 2), np.uint32, order="F"))
    decoding = chunk_decoding("compresso")
    assert decoding.decode(stream, (4, 4, 2, 1), np.uint64).dtype == np.uint64  # widened
    with pytest.raises(EncodingError, match=r"holds a \(4, 4, 2\) array, expected \(4, 4, 3\)"):
        decoding.decode(stream, (4, 4, 3, 1), np.uint32)
    with pytest.raises(EncodingError, match="holds uint32, expected uint16"):
        decoding.decode(stream, (4, 4, 2, 1), np.uint16)
    with pytest.raises(EncodingError, match="not a compresso stream"):
        decoding.decode(b"crkl" + stream[4:], (4, 4, 2, 1), np.uint32)


def test_without_its_package_plan_refuses_in_one_line(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module set to None in `sys.modules` is what `import` refuses (ModuleNotFoundError):
    here as if compresso were not installed."""
    src, out = tmp_path / "src", tmp_path / "out"
    _write(src, "compresso", "uint64", None)
    monkeypatch.setitem(sys.modules, "compresso", None)
    with pytest.raises(SourceError) as refused:
        api.plan(str(src), str(out))
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"{src}: scale '4_4_40': reading compresso chunks needs the compresso ")
    assert "pip install" in said and "[seg-codecs]" in said
    assert not out.exists()


def test_without_its_package_the_cli_plan_says_one_line(tmp_path: pathlib.Path) -> None:
    """The same from the command line, in a process where crackle cannot be imported."""
    src, out = tmp_path / "src", tmp_path / "out"
    _write(src, "crackle", "uint32", False)
    program = (
        "import sys; sys.modules['crackle'] = None\n"
        "from shardwright.cli import main\n"
        f"raise SystemExit(main(['plan', {str(src)!r}, {str(out)!r}]))\n"
    )
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "reading crackle chunks needs the crackle-codec package: pip install" in lines[0]
    assert not out.exists()
