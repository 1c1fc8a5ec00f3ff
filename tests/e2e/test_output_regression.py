"""Output regression: the exact bytes shardwright writes for a fixed set of small conversions,
pinned so that a change meant to keep behaviour (a redesign, a refactor) can prove it changed
no byte of any object it writes.

Each case writes a source generated here from closed-form integer patterns (no RNG, no
transcendental functions: the same voxels on every machine), converts it through the public API
(`api.plan` with a `ConvertOptions`, then `api.convert`) on Dask's synchronous scheduler, and
lists every object under the destination as `{relative key: [size, crc32c]}`. The synchronous
scheduler runs one task at a time: ISA-L gzip at levels 1-2 gives different (valid) bytes when
threads compress at once, which would make the pins flaky under the threaded scheduler. For
a few inputs it also does so in one thread, following the process's memory layout (about one
process in forty; never twice within one process): a case whose output differs is run again
in fresh processes, and passes (with a warning naming the first run's differences) only if
such a run matches every pin.

What is left out, and why (everything else is compared byte for byte):
- every object under `.shardwright/` (the job record, shard receipts, leases, heartbeats): they
  name the job's run id, its fingerprint (which includes the destination path), hosts, process
  ids and times, all different on every run;
- each `shardwright-manifest.json` is not compared as bytes: it carries the time it was written
  (`created`), the job id (`job`), measured durations (`seconds`), the cluster that ran it
  (`cluster`) and the source and destination paths. Its JSON is compared instead with the
  `created`, `job`, `seconds` and `cluster` members dropped (at any depth) and the case's
  temporary directory replaced by `<root>` in every string and key; all else (shard entries
  with key, size, crc32c and chunk count, the metadata digests, the plan, the totals, the
  request counts) is pinned.

`tests/e2e/output_crc32c.json` holds the expected values. Record them (after a change that is
meant to alter output) with

    SHARDWRIGHT_RECORD_OUTPUT=1 python -m pytest tests/e2e/test_output_regression.py

which converts every case twice, in two fresh directories, refuses to record a case whose two
runs differ, and rewrites the JSON (only the selected cases, with `-k`).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import google_crc32c
import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.options import ConvertOptions

EXPECTED = pathlib.Path(__file__).with_name("output_crc32c.json")
FRESH_PROCESS_RUNS = 3  # a case that differs is run again in up to this many new processes
RECORDING = os.environ.get("SHARDWRIGHT_RECORD_OUTPUT") == "1"
CONTROL_DIR = ".shardwright"  # job records, receipts, leases: different on every run
MANIFEST = "shardwright-manifest.json"
VARYING_MEMBERS = frozenset({"created", "job", "seconds", "cluster"})
ROOT_MARK = "<root>"
MiB = 1024**2

SHAPE = (64, 64, 32)  # x, y, z: a multiple of the chunk size below
ODD = (45, 38, 21)  # not a multiple of any chunk size: edge chunks at every level
SMALL = dict(chunk_size=(16, 16, 8), target_shard_bytes=16 * 1024, memory_budget=64 * MiB)


# -- closed-form sources ---------------------------------------------------------------------
def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 of each value: well-spread uint64 noise with no RNG behind it."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _zyx(shape_xyz: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y, z = shape_xyz
    zz, yy, xx = np.meshgrid(np.arange(z), np.arange(y), np.arange(x), indexing="ij")
    return xx, yy, zz


def image(shape_xyz: tuple[int, int, int], dtype: str, channels: int = 1) -> np.ndarray:
    """A (c,) z, y, x image in [0, 250]: ramps, a checkerboard of blocks and a little noise
    (scaled by 199 for uint16, by 1/7 for float32)."""
    xx, yy, zz = _zyx(shape_xyz)
    index = xx + shape_xyz[0] * (yy + shape_xyz[1] * zz)
    noise = (_mix(index) % np.uint64(13)).astype(np.int64)
    base = 20 + (3 * xx + 2 * yy) % 64 + 90 * ((xx // 8 + yy // 8 + zz // 4) % 2) + 2 * zz + noise
    planes = np.stack([np.clip(base + 17 * c, 0, 250) for c in range(channels)])
    if dtype == "uint16":
        planes = planes * 199
    vol = (planes / 7.0).astype(np.float32) if dtype == "float32" else planes.astype(dtype)
    return vol if channels > 1 else vol[0]


def labels(shape_xyz: tuple[int, int, int], dtype: str) -> np.ndarray:
    """A z, y, x segmentation of boxes with ids near the top of the dtype, a few zero."""
    xx, yy, zz = _zyx(shape_xyz)
    cells = (xx // 7) + 10 * (yy // 9) + 100 * (zz // 5)
    top = np.array(np.iinfo(dtype).max - 1000, dtype=dtype)
    return np.where(cells % 11 == 0, 0, top - cells.astype(dtype)).astype(dtype)


def _npy(make: Callable[[], np.ndarray]) -> Callable[[pathlib.Path], str]:
    def write(root: pathlib.Path) -> str:
        np.save(root / "source.npy", make())
        return str(root / "source.npy")

    return write


def segment_ids(count: int) -> list[int]:
    """Distinct ids spread over uint64: the extremes and `count - 7` hashed ones."""
    edge = [2**64 - 1, 2**64 - 2, 2**63, 2**32, 1, 2, 3]
    spread = _mix(np.arange(count - len(edge), dtype=np.uint64)).tolist()
    ids = sorted(set(edge) | set(spread))
    assert len(ids) == count
    return ids


def _write_json(path: pathlib.Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def write_multilod_meshes(directory: pathlib.Path, ids: list[int]) -> None:
    """`<id>.index` manifests (two levels of detail, 1-3 fragments at lod 0) and `<id>`
    fragment data; the fragments are opaque bytes to the converter."""
    _write_json(directory / "info", {
        "@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 10,
        "transform": [8, 0, 0, 0, 0, 8, 0, 0, 0, 0, 40, 0], "lod_scale_multiplier": 1.0,
    })  # fmt: skip
    for i, segment in enumerate(ids):
        count = 1 + i % 3
        nodes = sorted({(i * 5 + 3 * k) % 8 for k in range(count)})
        noise = _mix(np.arange(8 * i, 8 * i + count + 1, dtype=np.uint64))
        fragments = [b"DRACO" + bytes(int(n % 251) for _ in range(8 + int(n % 40))) for n in noise]
        lod0 = np.array([[n & 1, (n >> 1) & 1, (n >> 2) & 1] for n in nodes], "<u4").T
        origin = (float(i % 17) * 60.0, float(i % 5) * 200.0, 10.0)
        manifest = b"".join([
            struct.pack("<3f", 16.0, 16.0, 16.0), struct.pack("<3f", *origin),
            struct.pack("<I", 2), struct.pack("<2f", 1.0, 2.0), bytes(24),
            np.array([count, 1], "<u4").tobytes(), lod0.tobytes(),
            np.array([len(f) for f in fragments[:count]], "<u4").tobytes(),
            bytes(12), np.array([len(fragments[count])], "<u4").tobytes(),
        ])  # fmt: skip
        (directory / f"{segment}.index").write_bytes(manifest)
        (directory / str(segment)).write_bytes(b"".join(fragments))


def write_skeletons(directory: pathlib.Path, ids: list[int]) -> None:
    """Chains of 1-23 vertices with a float32 radius and a uint8 vertex type."""
    _write_json(directory / "info", {
        "@type": "neuroglancer_skeletons", "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
        "vertex_attributes": [
            {"id": "radius", "data_type": "float32", "num_components": 1},
            {"id": "vertex_types", "data_type": "uint8", "num_components": 1},
        ],
    })  # fmt: skip
    for i, segment in enumerate(ids):
        n = 1 + i % 23
        k = np.arange(n, dtype=np.int64)
        points = np.stack([k * 40 + i, (k * k) % 700 + 3 * i, (k * 7 + i) % 300], axis=1)
        edges = np.stack([k[:-1], k[1:]], axis=1)
        (directory / str(segment)).write_bytes(b"".join([
            struct.pack("<II", n, n - 1), points.astype("<f4").tobytes(),
            edges.astype("<u4").tobytes(), ((k % 9) * 2.5 + 1).astype("<f4").tobytes(),
            (k % 5).astype("u1").tobytes(),
        ]))  # fmt: skip


def write_legacy_meshes(directory: pathlib.Path, ids: list[int]) -> None:
    """`<id>:0` JSON naming two tetrahedron fragments `<id>:0:<k>` (legacy format)."""
    _write_json(directory / "info", {"@type": "neuroglancer_legacy_mesh"})
    faces = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], "<u4")
    for i, segment in enumerate(ids):
        names = [f"{segment}:0:{k}" for k in range(2)]
        for k, name in enumerate(names):
            corners = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
            vertices = corners * (100 + 37 * k + i) + np.float32(i * 13 + k * 500)
            (directory / name).write_bytes(
                struct.pack("<I", 4) + vertices.astype("<f4").tobytes() + faces.tobytes()
            )
        _write_json(directory / f"{segment}:0", {"fragments": names})


def segmentation_with_objects(root: pathlib.Path) -> str:
    """An unsharded precomputed segmentation (TensorStore) whose info names `mesh` and
    `skeletons` directories of 150 segments each."""
    path = root / "seg"
    volume = labels((32, 32, 16), "uint64").T[..., None]  # x, y, z, c
    store = ts.open({
        "driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/", "create": True,
        "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
        "scale_metadata": {"size": [32, 32, 16], "resolution": [8, 8, 40],
                           "chunk_size": [8, 8, 8], "encoding": "raw"},
    }).result()  # fmt: skip
    store[...] = volume
    info = json.loads((path / "info").read_text())
    _write_json(path / "info", {**info, "mesh": "mesh", "skeletons": "skeletons"})
    ids = segment_ids(150)
    write_multilod_meshes(path / "mesh", ids)
    write_skeletons(path / "skeletons", ids)
    return str(path)


def legacy_mesh_directory(root: pathlib.Path) -> str:
    write_legacy_meshes(root / "legacy", segment_ids(150))
    return str(root / "legacy")


# -- the cases -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    source: Callable[[pathlib.Path], str]  # writes the source under a directory, returns it
    options: dict[str, Any] = field(default_factory=dict)


def _case(name: str, make: Callable[[], np.ndarray], **options: Any) -> Case:
    return Case(name, _npy(make), {**SMALL, **options})


PC, Z3 = dict(format="precomputed"), dict(format="zarr3")
CASES = [
    _case("precomputed-raw-none-uint16", lambda: image(SHAPE, "uint16"), **PC,
          compression="none"),
    _case("precomputed-raw-gzip-uint8", lambda: image(SHAPE, "uint8"), **PC,
          compression="gzip"),
    _case("precomputed-raw-gzip-level1-float32", lambda: image(SHAPE, "float32"), **PC,
          compression="gzip", compression_level=1),
    _case("precomputed-jpeg", lambda: image(SHAPE, "uint8"), **PC, encoding="jpeg"),
    _case("precomputed-png-uint8", lambda: image(SHAPE, "uint8"), **PC, encoding="png"),
    _case("precomputed-png-uint16", lambda: image(SHAPE, "uint16"), **PC, encoding="png"),
    _case("precomputed-cseg-uint32", lambda: labels(SHAPE, "uint32"), **PC,
          encoding="compressed_segmentation", compressed_segmentation_block_size=(4, 8, 2)),
    _case("precomputed-cseg-uint64", lambda: labels(SHAPE, "uint64"), **PC,
          encoding="compressed_segmentation"),
    _case("precomputed-murmurhash", lambda: labels(SHAPE, "uint64"), **PC,
          encoding="compressed_segmentation", hash="murmurhash3_x86_128", minishard_bits=2,
          shard_bits=3),
    _case("precomputed-multichannel", lambda: image(SHAPE, "uint8", 3), **PC),
    _case("precomputed-edge-chunks", lambda: image(ODD, "uint16"), **PC),
    _case("precomputed-pyramid-image", lambda: image(ODD, "uint8"), **PC, mips=2),
    _case("precomputed-pyramid-segmentation", lambda: labels(ODD, "uint64"), **PC, mips=2,
          encoding="compressed_segmentation"),
    Case("precomputed-meshes-skeletons", segmentation_with_objects,
         {**SMALL, **PC, "encoding": "compressed_segmentation", "with_meshes": True,
          "with_skeletons": True}),
    Case("precomputed-legacy-meshes", legacy_mesh_directory,
         {**SMALL, "legacy_to_multires": True}),
    _case("zarr3-none", lambda: image(SHAPE, "uint16"), **Z3, compression="none"),
    _case("zarr3-gzip", lambda: image(SHAPE, "uint16"), **Z3, compression="gzip"),
    _case("zarr3-zstd", lambda: image(SHAPE, "uint16"), **Z3, compression="zstd"),
    _case("zarr3-blosc", lambda: image(SHAPE, "uint16"), **Z3, compression="blosc"),
    _case("zarr3-index-start", lambda: image(SHAPE, "uint16"), **Z3, index_location="start"),
    _case("zarr3-index-end", lambda: image(SHAPE, "uint16"), **Z3, index_location="end"),
    _case("zarr3-multichannel", lambda: image(SHAPE, "uint16", 2), **Z3),
    _case("zarr3-edge-chunks", lambda: image(ODD, "uint8"), **Z3),
    _case("zarr3-pyramid-image", lambda: image(ODD, "uint8"), **Z3, mips=2),
    _case("zarr3-pyramid-segmentation", lambda: labels(ODD, "uint64"), **Z3, mips=2,
          layer_type="segmentation"),
]  # fmt: skip

# Optional encoders some cases need: where one is not installed (a GPU machine's offline
# wheelhouse leaves them out), the case is skipped, not failed; CI installs both.
NEEDS = {
    "precomputed-png-uint8": "imagecodecs",
    "precomputed-png-uint16": "imagecodecs",
    "precomputed-legacy-meshes": "DracoPy",
}


# -- running a case and listing what it wrote ------------------------------------------------
def run_case(case: Case, root: pathlib.Path) -> dict[str, Any]:
    """Convert the case under `root` and return what it wrote: objects and manifests."""
    root.mkdir(parents=True)
    source = case.source(root)
    dest = root / "out"
    the_plan = api.plan(source, str(dest), ConvertOptions(**case.options))
    api.convert(the_plan, scheduler="sync", progress=False)
    objects: dict[str, list[int]] = {}
    manifests: dict[str, Any] = {}
    for path in sorted(p for p in dest.rglob("*") if p.is_file() or p.is_symlink()):
        key = path.relative_to(dest).as_posix()
        if CONTROL_DIR in key.split("/"):
            continue
        data = path.read_bytes()
        if path.name == MANIFEST:
            manifests[key] = normalized(json.loads(data), str(root))
        else:
            objects[key] = [len(data), google_crc32c.value(data)]
    return {"objects": objects, "manifests": manifests}


def run_case_elsewhere(case: Case, root: pathlib.Path) -> dict[str, Any]:
    """`run_case` in a fresh Python process (another memory layout)."""
    script = (
        "import json, pathlib, sys\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "import test_output_regression as t\n"
        f"case = next(c for c in t.CASES if c.name == {case.name!r})\n"
        f"print(json.dumps(t.run_case(case, pathlib.Path({str(root)!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return got


def normalized(value: Any, root: str) -> Any:
    """A manifest without its run-varying members, the case's directory as `<root>`."""
    if isinstance(value, dict):
        return {
            normalized(k, root): normalized(v, root)
            for k, v in value.items()
            if k not in VARYING_MEMBERS
        }
    if isinstance(value, list):
        return [normalized(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, ROOT_MARK)
    return value


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"totals.requests.gets": 12, "shards[0].crc32c": ...}: a document's leaves by path."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def differences(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """One line per differing, missing or extra object, and per differing manifest member."""
    lines = []
    want, have = expected.get("objects", {}), got["objects"]
    for key in sorted(set(want) | set(have)):
        if key not in have:
            lines.append(f"  missing: {key} (expected size {want[key][0]}, crc32c {want[key][1]})")
        elif key not in want:
            lines.append(f"  extra:   {key} (size {have[key][0]}, crc32c {have[key][1]})")
        elif want[key] != have[key]:
            lines.append(
                f"  differs: {key}: expected size {want[key][0]}, crc32c {want[key][1]}; "
                f"got size {have[key][0]}, crc32c {have[key][1]}"
            )
    want, have = expected.get("manifests", {}), got["manifests"]
    for key in sorted(set(want) | set(have)):
        if key not in have:
            lines.append(f"  missing: {key}")
            continue
        if key not in want:
            lines.append(f"  extra:   {key}")
            continue
        a, b = _flat(want[key]), _flat(have[key])
        for member in sorted(set(a) | set(b)):
            if a.get(member, "<absent>") != b.get(member, "<absent>"):
                lines.append(
                    f"  differs: {key} member {member}: expected "
                    f"{json.dumps(a.get(member, '<absent>'))}, got "
                    f"{json.dumps(b.get(member, '<absent>'))}"
                )
    return lines


# -- the expected values ---------------------------------------------------------------------
def _load_expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}


def _dump(expected: dict[str, Any]) -> str:
    """Indented JSON with lists of numbers on one line ([size, crc32c] above all)."""
    text = json.dumps(expected, indent=1, sort_keys=True) + "\n"
    return re.sub(
        r"\[\s+(-?[\d.eE+-]+(?:,\s+-?[\d.eE+-]+)*)\s+\]",
        lambda m: "[" + ", ".join(re.split(r",\s+", m.group(1))) + "]",
        text,
    )


@pytest.fixture(scope="module")
def recorded() -> Iterator[dict[str, Any]]:
    """What recording runs gathered; written (merged with the cases not run) at the end."""
    gathered: dict[str, Any] = {}
    yield gathered
    if RECORDING and gathered:
        names = {case.name for case in CASES}
        expected = {k: v for k, v in _load_expected().items() if k in names}
        EXPECTED.write_text(_dump({**expected, **gathered}))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_output_bytes_are_unchanged(
    case: Case, tmp_path: pathlib.Path, recorded: dict[str, Any]
) -> None:
    if case.name in NEEDS:
        pytest.importorskip(NEEDS[case.name])
    got = run_case(case, tmp_path / "a")
    if RECORDING:
        again = run_case(case, tmp_path / "b")
        unstable = differences(got, again)
        assert not unstable, f"case {case.name} is not deterministic:\n" + "\n".join(unstable)
        recorded[case.name] = got
        return
    expected = _load_expected().get(case.name)
    if expected is None:
        pytest.fail(
            f"case {case.name} has no recorded output in {EXPECTED.name}; record it with "
            "SHARDWRIGHT_RECORD_OUTPUT=1"
        )
    lines = differences(expected, got)
    if lines:
        # ISA-L gzip (level 2) writes, for a few inputs, different and equally valid bytes
        # in about one process in forty: the choice follows the process's memory layout
        # (never within one process; never with address randomisation off). A change in the
        # code changes the bytes in every process; that flake in one: fresh processes that
        # match the pins prove the code.
        for attempt in range(FRESH_PROCESS_RUNS):
            again = differences(expected, run_case_elsewhere(case, tmp_path / f"again{attempt}"))
            if not again:
                warnings.warn(
                    f"case {case.name}: a run differed from the pins and a run in a fresh "
                    "process matched them (ISA-L gzip's layout-dependent bytes):\n"
                    + "\n".join(lines),
                    stacklevel=1,
                )
                return
        pytest.fail(
            f"case {case.name}: the output differs from {EXPECTED.name} "
            f"({len(again)} difference(s), here and in {FRESH_PROCESS_RUNS} fresh processes):\n"
            + "\n".join(again),
            pytrace=False,
        )


@pytest.mark.skipif(RECORDING, reason="recording")
def test_every_case_is_recorded_and_nothing_else() -> None:
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names), "case names must be unique"
    assert sorted(_load_expected()) == sorted(names)
