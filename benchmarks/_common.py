"""Shared helpers for benchmark scripts: timing and the JSON result record."""

from __future__ import annotations

import compileall
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import time
from collections.abc import Callable
from typing import Any

RESULTS = pathlib.Path(__file__).parent / "results"


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Fastest wall time of `repeat` runs, in seconds (the least disturbed run)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def compile_package() -> None:
    """Compile shardwright's modules to bytecode before timing fresh processes, as a wheel
    install does. An editable install's sources are otherwise compiled again by every
    process where PYTHONDONTWRITEBYTECODE is set (~0.2 s of each start-up on 2 cores)."""
    import shardwright

    compileall.compile_dir(os.path.dirname(shardwright.__file__), quiet=1)


def versions(*packages: str) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def machine() -> dict[str, Any]:
    """What a result says of the machine it was measured on."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "python": platform.python_version(),
    }


def cli_options(options: dict[str, Any]) -> list[str]:
    """Options as `shardwright convert` takes them: chunk_size=(64, 64, 64) ->
    --chunk-size 64,64,64."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, tuple):
            value = ",".join(str(v) for v in value)
        out += [flag, str(value)]
    return out


def dir_bytes(path: str) -> int:
    """The bytes of every file under `path`."""
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def write_result(
    name: str,
    figures: dict[str, Any],
    packages: tuple[str, ...],
    *,
    device: Any = "cpu",
    directory: pathlib.Path = RESULTS,
) -> pathlib.Path:
    """Write one JSON result file named after the benchmark and today's date."""
    record = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "device": device},
        "versions": versions(*packages),
        "figures": figures,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
