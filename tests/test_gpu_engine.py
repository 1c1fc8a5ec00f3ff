"""The GPU engine: a clear refusal where it cannot run, and (on a CUDA machine, `gpu` marker)
shards byte-identical to the CPU engine's."""

from __future__ import annotations

import builtins
import pathlib
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster

from shardwright import api, cli
from shardwright.engine import gpu
from shardwright.engine.cpu import run_shard
from shardwright.plan import PlanError
from shardwright.store import Store


def _device_present() -> bool:
    try:
        gpu.cupy_module()
    except gpu.GpuUnavailable:
        return False
    return True


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
        with pytest.raises(gpu.GpuUnavailable, match=r"pip install 'shardwright\[gpu\]'"):
            gpu.cupy_module()
    finally:
        gpu.cupy_module.cache_clear()


def test_what_the_gpu_engine_does_not_encode_is_refused(tmp_path: pathlib.Path) -> None:
    plan = _plan(tmp_path, "uint8", encoding="png")
    with pytest.raises(gpu.GpuUnavailable, match="use the CPU engine for png"):
        gpu.check_gpu_plan(plan)


@pytest.mark.gpu
@pytest.mark.skipif(not _device_present(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("options", [
    {"compression": "none"},
    {"encoding": "compressed_segmentation", "layer_type": "segmentation"},
    {"format": "zarr3", "compression": "gzip"},
])  # fmt: skip
def test_gpu_shards_equal_the_cpu_engines(tmp_path: pathlib.Path, options: dict[str, Any]) -> None:
    plan = _plan(tmp_path, **options)
    gpu.check_gpu_plan(plan)
    cpu, device = Store(str(tmp_path / "cpu")), Store(str(tmp_path / "gpu"))
    for task in plan.shards():
        want = run_shard(plan, task, cpu)
        got = gpu.run_shard_gpu(plan, task, device)
        assert (got["size"], got["crc32c"]) == (want["size"], want["crc32c"])
        if not want["empty"]:
            assert device.read(task.key) == cpu.read(task.key)


@pytest.mark.skipif(_device_present(), reason="checks the refusal on machines without a GPU")
def test_cli_gpu_without_a_device_fails_before_writing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan(tmp_path)
    code = cli.main(["convert", str(tmp_path / "v.npy"), str(tmp_path / "out"), "--gpu"])
    assert code == 2
    assert "pip install 'shardwright[gpu]'" in capsys.readouterr().err
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
    graph = api.convert(plan, scheduler="tcp://127.0.0.1:1", compute=False, progress=False)
    annotations = [layer.annotations or {} for layer in graph.dask.layers.values()]
    shard_layers = [a for a in annotations if a.get("retries")]
    assert shard_layers and all(a["resources"] == {"GPU": 1} for a in shard_layers)
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
        pytest.raises(PlanError, match="--resources GPU=1"),
    ):
        api.convert(_plan(tmp_path, engine="gpu"), client=client, overwrite=True)
    assert not list((tmp_path / "out").rglob("*.shard"))
