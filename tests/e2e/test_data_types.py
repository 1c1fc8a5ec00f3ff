"""Every Zarr v3 core data type (bool, int8..int64, uint8..uint64, float16..float64,
complex64, complex128; the raw bits `r*` have no NumPy type a source could hold) written to
zarr3 exactly, read back bit for bit by TensorStore and zarr-python; `plan` says which of them
Neuroglancer cannot display; precomputed output refuses the types its format lacks in one line
naming the type and the format; pyramids refuse the reductions a type cannot take."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tensorstore as ts
import zarr

from shardwright import api, cli
from shardwright.engine.batched import run_shard_batched
from shardwright.engine.cpu import run_shard
from shardwright.stores import open_store

CORE_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128")  # fmt: skip
NEUROGLANCER = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
PRECOMPUTED = NEUROGLANCER
SHAPE_ZYX = (12, 10, 9)  # chunks of 4: edge chunks on every axis
COMMON = ["--resolution", "1,1,1", "--chunk-size", "4,4,4", "--scheduler", "sync", "--quiet"]


def _main(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(words))
    said = capsys.readouterr()
    return code, said.out, said.err


def _voxels(dtype: str) -> np.ndarray:
    """z, y, x voxels spanning the type: its extremes, and for floats NaN, infinities and a
    chunk of nothing but -0.0 (which is not the fill value 0.0 to a reader of bits)."""
    kind = np.dtype(dtype).kind
    count = int(np.prod(SHAPE_ZYX))
    if kind == "b":
        return (np.arange(count) % 3 == 0).reshape(SHAPE_ZYX)
    if kind in "iu":
        info = np.iinfo(dtype)
        rng = np.random.default_rng(5)
        zyx = rng.integers(info.min, info.max, SHAPE_ZYX, dtype=dtype, endpoint=True)
        zyx.flat[:2] = info.min, info.max
        return zyx
    real = np.random.default_rng(5).normal(0, 1e3, SHAPE_ZYX)
    zyx = (real + 1j * real[::-1] if kind == "c" else real).astype(dtype)
    zyx[0, 0, :3] = np.nan, np.inf, -np.inf
    zyx[4:8, 4:8, 4:8] = -0.0  # one whole chunk
    return zyx


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint8)


@pytest.mark.parametrize("dtype", CORE_TYPES)
def test_every_zarr_v3_core_type_is_written_exactly(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    zyx = _voxels(dtype)
    np.save(tmp_path / "src.npy", zyx)
    out = tmp_path / "out"
    code, said, err = _main(capsys, "plan", str(tmp_path / "src.npy"), str(out), "--format",
                            "zarr3", *COMMON[:4])  # fmt: skip
    assert code == 0, err
    cannot = f"Neuroglancer cannot display {dtype} voxels"
    assert (cannot in err) == (dtype not in NEUROGLANCER), err
    code, _, err = _main(capsys, "convert", str(tmp_path / "src.npy"), str(out), "--format",
                         "zarr3", *COMMON)  # fmt: skip
    assert code == 0, err
    by_tensorstore = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                              "path": f"{out}/0/"}}).result().read().result()  # fmt: skip
    by_zarr_python = zarr.open_array(str(out / "0"), mode="r")[...]
    for back in (np.asarray(by_tensorstore), by_zarr_python):
        assert back.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(_bits(back), _bits(zyx))  # NaN, -0.0: the same bits
    assert _main(capsys, "verify", str(out), "--against", str(tmp_path / "src.npy"),
                 "--full")[0] == 0  # fmt: skip


@pytest.mark.parametrize("dtype", [t for t in CORE_TYPES if t not in PRECOMPUTED])
def test_precomputed_refuses_the_types_it_lacks_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    np.save(tmp_path / "src.npy", _voxels(dtype))
    out = tmp_path / "out"
    code, said, err = _main(capsys, "convert", str(tmp_path / "src.npy"), str(out), *COMMON)
    assert code == 2 and said == ""
    assert err.strip().splitlines() == [
        f"shardwright convert: error: precomputed output cannot hold {dtype} voxels (its data "
        f"types: {', '.join(PRECOMPUTED)}); zarr3 output holds every Zarr v3 core data type: "
        "pass --format zarr3"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("dtype", "method", "refusal"),
    [
        ("bool", "average", "booleans have no average); pass --downsample mode, mode-nonzero, "
                            "min, max or striding"),
        ("complex64", "mode", "complex numbers have no order and are no labels); pass "
                              "--downsample average or striding"),
        ("complex128", "max", "complex numbers have no order and are no labels); pass "
                              "--downsample average or striding"),
    ],
)  # fmt: skip
def test_pyramids_refuse_a_reduction_the_type_cannot_take(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], dtype: str, method: str,
    refusal: str,
) -> None:  # fmt: skip
    np.save(tmp_path / "src.npy", _voxels(dtype))
    code, _, err = _main(capsys, "plan", str(tmp_path / "src.npy"), str(tmp_path / "out"),
                         "--format", "zarr3", "--mips", "1", "--downsample", method,
                         *COMMON[:4])  # fmt: skip
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"shardwright plan: error: {method} cannot downsample {dtype} voxels ({refusal}"
    )


@pytest.mark.parametrize(("dtype", "method"), [("bool", None), ("bool", "max"),
                                               ("float16", None), ("complex64", None)])  # fmt: skip
def test_pyramids_of_the_other_types_are_built(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], dtype: str, method: str | None
) -> None:
    """A mask's default reduction is the mode (booleans have no average); its level 1, read by
    TensorStore, is each 2 x 2 x 2 block's majority (max: any)."""
    zyx = _voxels(dtype)
    if zyx.dtype.kind in "fc":
        zyx[0, 0, :3] = 1.0  # finite values only: NumPy's mean below is the level's, exactly
    np.save(tmp_path / "src.npy", zyx)
    out = tmp_path / "out"
    chosen = [] if method is None else ["--downsample", method]
    code, _, err = _main(capsys, "convert", str(tmp_path / "src.npy"), str(out), "--format",
                         "zarr3", "--mips", "1", *chosen, *COMMON)  # fmt: skip
    assert code == 0, err
    level = np.asarray(ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                "path": f"{out}/1/"}}).result().read().result())  # fmt: skip
    whole = zyx[:12, :10, :8].reshape(6, 2, 5, 2, 4, 2)  # blocks whole on every axis
    if dtype == "bool":
        count = whole.sum(axis=(1, 3, 5))
        first = whole[:, 0, :, 0, :, 0]  # of a tie (4 of 8), the value met first wins
        want = count > 0 if method == "max" else np.where(count == 4, first, count > 4)
        np.testing.assert_array_equal(level[:6, :5, :4], want)
    else:
        want = whole.astype(np.complex128 if dtype.startswith("complex") else np.float64)
        np.testing.assert_array_equal(level[:6, :5, :4], want.mean(axis=(1, 3, 5)).astype(dtype))
    assert _main(capsys, "verify", str(out), "--against", str(tmp_path / "src.npy"),
                 "--full")[0] == 0  # fmt: skip


@pytest.mark.filterwarnings("ignore:Neuroglancer cannot display")
@pytest.mark.parametrize("dtype", ["bool", "float16", "float64", "complex64", "complex128"])
def test_the_gpu_engines_pipeline_writes_the_same_bytes(tmp_path: pathlib.Path, dtype: str) -> None:
    """The batched pipeline the GPU engine runs, here over NumPy: every shard of these types
    byte-identical to the CPU engine's (the -0.0 chunk kept by both)."""
    np.save(tmp_path / "src.npy", _voxels(dtype))
    plan = api.plan(str(tmp_path / "src.npy"), str(tmp_path / "cpu"), format="zarr3",
                    resolution=(1, 1, 1), chunk_size=(4, 4, 4), target_shard_bytes=512)  # fmt: skip
    cpu, batched = open_store(str(tmp_path / "cpu")), open_store(str(tmp_path / "batched"))
    tasks = list(plan.shards())
    assert len(tasks) >= 2
    for task in tasks:
        want = run_shard(plan, task, cpu)
        got = run_shard_batched(plan, task, batched, np)
        assert (got.key, got.size, got.crc32c, got.chunks) == (
            want.key, want.size, want.crc32c, want.chunks
        )  # fmt: skip
        if not want.empty:
            assert batched.read(task.key) == cpu.read(task.key)
