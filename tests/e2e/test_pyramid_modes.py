"""A segmentation's two modes against tinybrain, the field's downsampler (Igneous uses it):
`mode` is `downsample_segmentation(sparse=False)`, `mode-nonzero` is `sparse=True`, ties and
odd-sized edges included. Held at the reduction (C kernels and the NumPy path that CuPy also
runs, any memory layout, slab by slab) and end to end: `shardwright convert --mips 2` read
back level by level by TensorStore and CloudVolume, each level tinybrain's reduction of the
level below (and verify, recomputing the levels by the method the manifest names, agrees).

tinybrain's 2x2x2 kernel reads its input's buffer as Fortran-ordered whatever its strides
(CloudVolume hands it such arrays), so it is always given one here.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given
from hypothesis import strategies as st

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.common import downsample
from shardwright.lifecycle.fingerprint import digest

tinybrain = pytest.importorskip("tinybrain")

SPARSE = {"mode": False, "mode-nonzero": True}
# The factors tinybrain reduces in one pass: its 2x2x2 counting kernel and COUNTLESS planes.
FACTORS = [(2, 2, 2), (2, 2, 1), (2, 1, 2), (1, 2, 2)]


def tinybrain_level(labels_xyz: np.ndarray, factor: tuple[int, int, int], method: str) -> Any:
    (level,) = tinybrain.downsample_segmentation(
        np.asfortranarray(labels_xyz), factor, sparse=SPARSE[method]
    )
    return level


def labels_with_background(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, labels: int = 3
) -> np.ndarray:
    """Mostly zero, a few labels (64-bit ones for uint64): majorities of background and
    ties between labels in many blocks."""
    ids = [1, 2, 3, 7, 2**31 + 5] if dtype == "uint32" else [1, 2, 2**32 + 9, 2**63 + 11, 5]
    pool = np.array([0, 0, 0, *ids[:labels]], dtype=dtype)
    return rng.choice(pool, size=shape)


@pytest.mark.parametrize("method", downsample.MODES)
@given(
    dtype=st.sampled_from(["uint32", "uint64"]),
    factor=st.sampled_from(FACTORS),
    shape=st.tuples(st.integers(1, 11), st.integers(1, 11), st.integers(1, 9)),
    labels=st.integers(1, 5),
    layout=st.sampled_from(["C", "F"]),
    kernels=st.sampled_from(["C", "NumPy"]),
    slab=st.sampled_from([None, 1]),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_mode_is_tinybrains(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    dtype: str,
    factor: tuple[int, int, int],
    shape: tuple[int, int, int],
    labels: int,
    layout: str,
    kernels: str,
    slab: int | None,
    seed: int,
) -> None:
    vol = labels_with_background(np.random.default_rng(seed), shape, dtype, labels)
    block = np.asfortranarray(vol[..., None]) if layout == "F" else vol[..., None]
    with monkeypatch.context() as patched:
        if kernels == "NumPy":
            patched.setattr(downsample, "_reduce", None)
        got = downsample.downsample(np, block, factor, method, max_slab_bytes=slab)
    want = tinybrain_level(vol, factor, method)
    assert got.dtype == want.dtype and got[..., 0].shape == want.shape
    np.testing.assert_array_equal(got[..., 0], want)


def test_the_two_modes_differ_where_background_is_the_majority() -> None:
    """Seven zeros and one label: the label under mode-nonzero, zero under mode (the case
    that made plain mode the default)."""
    vol = np.zeros((4, 4, 4), np.uint64)
    vol[1, 1, 1] = 42
    for method, want in (("mode", 0), ("mode-nonzero", 42)):
        got = downsample.downsample(np, vol[..., None], (2, 2, 2), method)[..., 0]
        assert got[0, 0, 0] == want == tinybrain_level(vol, (2, 2, 2), method)[0, 0, 0]


# -- end to end -----------------------------------------------------------------------------------
SIZE_XYZ = (37, 29, 19)  # odd along every axis: partial blocks at every level's far edges

E2E = [  # dtype, factor, --downsample (None: the segmentation default)
    ("uint32", (2, 2, 2), None),
    ("uint64", (2, 2, 1), "mode"),
    ("uint64", (2, 2, 2), "mode-nonzero"),
    ("uint32", (2, 2, 1), "mode-nonzero"),
]


def _levels(dest: pathlib.Path, count: int) -> list[dict[str, np.ndarray]]:
    """Each level [x, y, z] as TensorStore and CloudVolume read it."""
    CloudVolume = pytest.importorskip("cloudvolume").CloudVolume  # noqa: N806
    out = []
    for k in range(count):
        spec = {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{dest}/",
            "scale_index": k,
        }
        via_ts = np.asarray(ts.open(spec).result().read().result())[..., 0]
        via_cv = np.asarray(CloudVolume(f"file://{dest}", mip=k, progress=False)[:, :, :])
        out.append({"tensorstore": via_ts, "cloudvolume": via_cv[..., 0]})
    return out


@pytest.mark.parametrize("case", E2E, ids=[f"{c[0]}-{''.join(map(str, c[1]))}-{c[2]}" for c in E2E])
def test_converted_pyramid_levels_are_tinybrains(tmp_path: pathlib.Path, case: tuple) -> None:
    dtype, factor, method = case
    vol = labels_with_background(np.random.default_rng(3), SIZE_XYZ, dtype)
    np.save(tmp_path / "labels.npy", vol.T)  # z, y, x on disk, as arrays are written
    dest = tmp_path / "out"
    args = ["convert", str(tmp_path / "labels.npy"), str(dest), "--layer-type", "segmentation",
            "--mips", "2", "--factor", ",".join(map(str, factor)), "--chunk-size", "16,16,8",
            "--scheduler", "sync", "--quiet"]  # fmt: skip
    if method is not None:
        args += ["--downsample", method]
    assert cli_main(args) == 0
    method = method or "mode"
    want = [vol]
    for _ in range(2):
        want.append(tinybrain_level(want[-1], factor, method))
    other = "mode-nonzero" if method == "mode" else "mode"
    assert not np.array_equal(want[1], tinybrain_level(vol, factor, other)), "modes alike here"
    for k, readers in enumerate(_levels(dest, 3)):
        for reader, got in readers.items():
            np.testing.assert_array_equal(got, want[k], err_msg=f"level {k} via {reader}")
    report = api.verify(str(dest), str(tmp_path / "labels.npy"), full=True)  # by its method
    assert report.ok, report.summary()


def test_a_pyramid_begun_under_other_mode_rules_is_not_resumed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mode` changed meaning (it ignored background before): a job record written under the
    former rules (its fingerprint without `downsample_rules`, as earlier versions wrote it)
    is refused by --resume, naming the difference, so no pyramid mixes levels of both."""
    labels = labels_with_background(np.random.default_rng(7), (24, 32, 32), "uint32")
    np.save(tmp_path / "labels.npy", labels)
    dest = tmp_path / "out"
    args = ["convert", str(tmp_path / "labels.npy"), str(dest), "--mips", "1"]
    assert cli_main([*args, "--scheduler", "sync", "--quiet"]) == 0
    record_path = dest / ".shardwright" / "job.json"
    record = json.loads(record_path.read_text())
    del record["fingerprint"]["encoding"]["downsample_rules"]
    record["job"] = digest(record["fingerprint"])  # the job id an earlier version gave it
    record_path.write_text(json.dumps(record))
    (dest / "shardwright-manifest.json").unlink()
    capsys.readouterr()
    assert cli_main([*args, "--scheduler", "sync", "--quiet", "--resume"]) == 2
    assert "encoding.downsample_rules: null -> 2" in capsys.readouterr().err


def test_verify_does_not_judge_levels_written_under_earlier_rules(tmp_path: pathlib.Path) -> None:
    """A manifest whose pyramid predates the rules it names (no `rules`: `mode` then ignored
    background) has its base compared and its upper levels left out, with a note, rather
    than failed for differences the former rules made."""
    labels = labels_with_background(np.random.default_rng(8), (16, 32, 32), "uint32")
    np.save(tmp_path / "labels.npy", labels)
    dest = tmp_path / "out"
    api.convert(str(tmp_path / "labels.npy"), str(dest), mips=1, scheduler="sync", progress=False)
    every_level = api.verify(str(dest), str(tmp_path / "labels.npy"), full=True)
    assert every_level.ok
    manifest_path = dest / "shardwright-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["plan"]["pyramid"]["rules"]
    manifest_path.write_text(json.dumps(manifest))
    base_only = api.verify(str(dest), str(tmp_path / "labels.npy"), full=True)
    assert base_only.ok and any("earlier downsampling rules" in n for n in base_only.notes)
    assert 0 < base_only.chunks_compared < every_level.chunks_compared
