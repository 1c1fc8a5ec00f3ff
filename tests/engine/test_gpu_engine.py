"""The GPU engine: a clear refusal where it cannot run, and (on a CUDA machine, `gpu` marker)
shards byte-identical to the CPU engine's."""

from __future__ import annotations

import builtins
import dataclasses
import json
import pathlib
import re
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster

from shardwright import api, cli
from shardwright.codecs.nvcomp import NvcompCompressor, gzip_algorithm_type
from shardwright.engine import gpu
from shardwright.engine.aggregate import EncodedChunks
from shardwright.engine.batched import run_shard_batched
from shardwright.engine.cpu import run_shard
from shardwright.errors import PlanError
from shardwright.planning import capabilities
from shardwright.stores import open_store
from shardwright.version import install_command
from tests.support.gpu import gpu_missing


def _plan(tmp_path: pathlib.Path, dtype: str = "uint64", **options: Any) -> Any:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, (9, 12, 10)).repeat(4, 0).repeat(4, 1).repeat(4, 2)
    np.save(tmp_path / "v.npy", labels[:33, :45, :38].astype(dtype))
    return api.plan(
        str(tmp_path / "v.npy"),
        str(tmp_path / "out"),
        chunk_size=(16, 16, 8),
        target_shard_bytes=40_000,
        min_shards=2,
        **options,
    )


def test_without_cupy_the_gpu_engine_is_refused_clearly(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_cupy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    gpu.cupy_module.cache_clear()
    try:
        with pytest.raises(gpu.GpuUnavailable, match=re.escape(install_command("gpu-cu13"))):
            gpu.cupy_module()
    finally:
        gpu.cupy_module.cache_clear()


def test_what_the_gpu_engine_does_not_encode_is_refused(tmp_path: pathlib.Path) -> None:
    plan = _plan(tmp_path, "uint8", encoding="jpeg")
    with pytest.raises(gpu.GpuUnavailable, match="use the CPU engine for jpeg"):
        capabilities.check_gpu_plan(plan)


@pytest.mark.gpu
@pytest.mark.parametrize("device_budget", [None, 0], ids=["within-budget", "copied-out"])
@pytest.mark.parametrize("options", [
    {"compression": "none"},
    {"encoding": "compressed_segmentation", "layer_type": "segmentation"},
    {"format": "zarr3", "compression": "gzip"},
])  # fmt: skip
def test_gpu_shards_equal_the_cpu_engines(
    tmp_path: pathlib.Path, options: dict[str, Any], device_budget: int | None
) -> None:
    plan = dataclasses.replace(_plan(tmp_path, **options), epoch_shape_chunks=(2, 1, 2))
    capabilities.check_gpu_plan(plan)
    cpu, device = open_store(str(tmp_path / "cpu")), open_store(str(tmp_path / "gpu"))
    cupy = gpu.cupy_module()
    for task in plan.shards():
        want = run_shard(plan, task, cpu)
        got = run_shard_batched(plan, task, device, cupy, device_budget=device_budget)
        fields = ("size", "crc32c", "chunks", "empty", "requests")
        assert {k: getattr(got, k) for k in fields} == {k: getattr(want, k) for k in fields}
        if not want.empty:
            assert device.read(task.key) == cpu.read(task.key)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [
    {"compression": "none"},
    {"encoding": "compressed_segmentation", "layer_type": "segmentation"},
])  # fmt: skip
def test_concurrent_gpu_tasks_on_their_own_streams_write_what_one_at_a_time_does(
    tmp_path: pathlib.Path, options: dict[str, Any]
) -> None:
    """Four threads run the shard tasks at once, as a GPU worker's threads do, each task on its
    thread's stream, two boxes staged in turn: every shard equals the one a task alone wrote,
    and the CPU engine's where no byte codec runs on the device (cseg's gzip is nvCOMP's)."""
    from concurrent.futures import ThreadPoolExecutor

    plan = dataclasses.replace(_plan(tmp_path, **options), epoch_shape_chunks=(1, 1, 1))
    alone, together = open_store(str(tmp_path / "alone")), open_store(str(tmp_path / "together"))
    tasks = list(plan.shards())
    assert len(tasks) >= 2 and all(len(list(plan.epochs(t))) > 1 for t in tasks)  # boxes
    for task in tasks:
        gpu.run_shard_gpu(plan, task, alone)
    with ThreadPoolExecutor(4) as threads:
        for _ in range(3):  # again, reusing each thread's stream and staging ring
            list(threads.map(lambda t: gpu.run_shard_gpu(plan, t, together), tasks))
            for task in tasks:
                assert together.read(task.key) == alone.read(task.key)
    cpu, host_bytes = open_store(str(tmp_path / "cpu")), open_store(str(tmp_path / "host_bytes"))
    for task in tasks:
        run_shard(plan, task, cpu)
        gpu.run_shard_gpu(plan, task, host_bytes, device_codecs=False)
        assert cpu.read(task.key) == host_bytes.read(task.key)
    if gpu.device_compressor(plan) is None:
        assert all(cpu.read(t.key) == alone.read(t.key) for t in tasks)


@pytest.mark.gpu
def test_a_shard_four_times_the_budget_holds_the_budget_plus_one_epoch_on_the_device() -> None:
    """Measured by CuPy's memory pool: 16 epochs of 2 MiB under an 8 MiB budget."""
    cupy = gpu.cupy_module()
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    base = pool.used_bytes()
    epoch = 2 << 20
    held = EncodedChunks(cupy, device_budget=8 << 20, host_budget=4 << 20)
    blobs: list[bytes] = []
    peak = 0
    for _ in range(16):
        buffer = cupy.random.randint(0, 255, epoch).astype(cupy.uint8)
        blobs += [bytes(part) for part in buffer.get().reshape(8, -1)]
        held.add(buffer, np.arange(8) * (epoch // 8), np.full(8, epoch // 8))
        del buffer
        peak = max(peak, pool.used_bytes() - base)
    assert held.copied_out == 12 * epoch
    order = np.random.default_rng(0).permutation(len(blobs))
    pieces = held.arrange(order)
    peak = max(peak, held.device_peak)
    assert b"".join(pieces()) == b"".join(blobs[i] for i in order.tolist())
    assert peak <= (8 << 20) + epoch
    held.close()
    assert pool.used_bytes() - base == 0


@pytest.mark.skipif(gpu_missing() is None, reason="checks the refusal on machines without a GPU")
def test_cli_gpu_without_a_device_fails_before_writing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan(tmp_path)
    code = cli.main(["convert", str(tmp_path / "v.npy"), str(tmp_path / "out"), "--gpu"])
    assert code == 2
    assert install_command("gpu-cu13") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_gpu_plans_are_made_anywhere_and_refuse_what_the_engine_cannot_run(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Planning for a GPU cluster needs no GPU here; an unsupported encoding is refused."""
    _plan(tmp_path)
    assert cli.main(["plan", str(tmp_path / "v.npy"), str(tmp_path / "out"), "--gpu"]) == 0
    code = cli.main(
        ["plan", str(tmp_path / "v.npy"), str(tmp_path / "out"), "--gpu", "--hash",
         "murmurhash3_x86_128"]
    )  # fmt: skip
    assert code == 2 and "spatial-box shards" in capsys.readouterr().err


def test_gpu_shard_tasks_ask_for_gpu_workers(tmp_path: pathlib.Path) -> None:
    """Shard tasks carry the GPU resource, and a cluster without GPU workers is refused."""
    plan = _plan(tmp_path, engine="gpu")
    pending = api.convert(plan, scheduler="tcp://127.0.0.1:1", compute=False, progress=False)
    assert isinstance(pending, api.PendingConversion)
    nodes = pending.nodes()
    assert nodes and all(node.gpu for node in nodes)
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
        pytest.raises(PlanError, match="--resources GPU=1"),
    ):
        api.convert(_plan(tmp_path, engine="gpu"), client=client, overwrite=True)
    assert not list((tmp_path / "out").rglob("*.shard"))


@pytest.mark.parametrize(("options", "algorithm"), [
    ({"compression": "gzip"}, "Gzip"),
    ({"compression": "none"}, None),
    ({"encoding": "compressed_segmentation", "layer_type": "segmentation"}, "Gzip"),
    ({"encoding": "compressed_segmentation", "compression": "none"}, None),
    ({"format": "zarr3", "compression": "gzip"}, "Gzip"),
    ({"format": "zarr3", "compression": "zstd"}, "Zstd"),
    ({"format": "zarr3", "compression": "blosc"}, None),
    ({"format": "zarr3", "compression": "none"}, None),
])  # fmt: skip
def test_device_codecs_cover_gzip_and_zstd_and_leave_the_rest_to_the_host(
    tmp_path: pathlib.Path, options: dict[str, Any], algorithm: str | None
) -> None:
    compressor = gpu.device_compressor(_plan(tmp_path, "uint32", **options))
    assert (compressor.algorithm if isinstance(compressor, NvcompCompressor) else None) == (
        algorithm
    )


def test_gzip_levels_map_to_nvcomp_effort() -> None:
    assert [gzip_algorithm_type(level) for level in (None, 1, 3, 4, 5, 6, 8, 9)] == [
        1, 1, 1, 2, 2, 4, 4, 5,
    ]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("options", [
    {"compression": "gzip"},
    {"format": "zarr3", "compression": "gzip"},
    {"format": "zarr3", "compression": "zstd", "index_location": "start"},
])  # fmt: skip
def test_nvcomp_shards_decode_to_the_source_in_tensorstore(
    tmp_path: pathlib.Path, options: dict[str, Any]
) -> None:
    """Device-compressed shards are another encoder's bytes: TensorStore (zlib / zstd inside)
    must read every chunk back as the source."""
    pytest.importorskip("nvidia.nvcomp")
    import tensorstore as ts

    plan = dataclasses.replace(_plan(tmp_path, "uint8", **options), epoch_shape_chunks=(2, 1, 2))
    store = open_store(str(tmp_path / "out"))
    for key, document in plan.metadata_documents():
        store.write_text(key, json.dumps(document))
    for task in plan.shards():
        gpu.run_shard_gpu(plan, task, store, device_codecs=True)
    zarr = options.get("format") == "zarr3"
    # zarr3: the level array 0/ under the OME-Zarr group at the root.
    spec = {"driver": "zarr3" if zarr else "neuroglancer_precomputed",
            "kvstore": f"file://{tmp_path / 'out'}/{'0/' if zarr else ''}"}  # fmt: skip
    got = np.asarray(ts.open(spec).result().read().result())
    source = np.load(tmp_path / "v.npy")
    want = source if zarr else source.transpose(2, 1, 0)[..., None]
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["uint8", "uint64"])
def test_upload_moves_a_transposed_box_in_memory_order(dtype: str) -> None:
    """A source box (a sliced, transposed view of a z, y, x file) arrives on the device equal
    to the view, as a view in the same axis order."""
    from shardwright.common.arrays import upload

    cupy = gpu.cupy_module()
    base = np.random.default_rng(5).integers(0, 2**8 - 1, (40, 50, 60)).astype(dtype)
    for view in (base[3:37, 5:45, 7:59].transpose(2, 1, 0)[..., np.newaxis], base, base[:0]):
        moved = upload(cupy, view)
        assert isinstance(moved, cupy.ndarray) and moved.shape == view.shape
        np.testing.assert_array_equal(moved.get(), view)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [
    {"compression": "gzip"},
    {"encoding": "compressed_segmentation", "layer_type": "segmentation"},
    {"format": "zarr3", "compression": "zstd"},
])  # fmt: skip
def test_a_gpu_job_reads_back_exactly_and_verifies(
    tmp_path: pathlib.Path, options: dict[str, Any]
) -> None:
    """The whole job as a user runs it (`engine="gpu"`: a dask-cuda cluster, nvCOMP for gzip
    and zstd): TensorStore reads the source back and `verify --full` passes."""
    import tensorstore as ts

    dtype = "uint64" if options.get("encoding") else "uint8"
    plan = _plan(tmp_path, dtype, engine="gpu", **options)
    api.convert(plan, progress=False)
    assert api.verify(str(tmp_path / "out"), str(tmp_path / "v.npy"), full=True).ok
    zarr = options.get("format") == "zarr3"
    spec = {"driver": "zarr3" if zarr else "neuroglancer_precomputed",
            "kvstore": f"file://{tmp_path / 'out'}/{'0/' if zarr else ''}"}  # fmt: skip
    got = np.asarray(ts.open(spec).result().read().result())
    source = np.load(tmp_path / "v.npy")
    np.testing.assert_array_equal(got, source if zarr else source.transpose(2, 1, 0)[..., None])
