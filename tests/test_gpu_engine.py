"""The GPU engine: a clear refusal where it cannot run, and (on a CUDA machine, `gpu` marker)
shards byte-identical to the CPU engine's."""

from __future__ import annotations

import builtins
import pathlib
from typing import Any

import numpy as np
import pytest

from shardwright import api
from shardwright.engine import gpu
from shardwright.engine.cpu import run_shard
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
            gpu.check_gpu_plan(_plan(tmp_path, layer_type="segmentation"))
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
