"""Shared test settings: modest hypothesis budgets for a 2-core CI machine; the object-store
servers on 127.0.0.1, one of each per test module that asks for them; tests marked `gpu`
skip by themselves where no CUDA device answers (CI has none); the browser tests' screenshots
listed at the end of the report (`keep_screenshot`). The helper modules (`volumes`,
`segment_objects`, `object_store_servers`, ...) are the package `tests.support`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support.gpu import gpu_missing

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("SHARDWRIGHT_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("ci")


SCREENSHOTS = pytest.StashKey[list[str]]()


@pytest.fixture()
def keep_screenshot(request: pytest.FixtureRequest) -> Any:
    """Name a screenshot a test wrote, for the list at the end of the run's report."""
    kept = request.config.stash.setdefault(SCREENSHOTS, [])
    return lambda path: kept.append(f"{request.node.nodeid}: {path}")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    kept = config.stash.get(SCREENSHOTS, [])
    if kept:
        terminalreporter.section("screenshots (Neuroglancer in headless Chromium)")
        for line in kept:
            terminalreporter.write_line(line)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Test processes for `-n auto` (pyproject's default): one more than the cores, at least
    three, as most of the suite's time is spent waiting on servers, clusters and timeouts,
    not computing. SHARDWRIGHT_TEST_PROCESSES sets it; `-n 0` runs in this process."""
    chosen = os.environ.get("SHARDWRIGHT_TEST_PROCESSES")
    return int(chosen) if chosen else max(3, (os.cpu_count() or 1) + 1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and (reason := gpu_missing()):
        pytest.skip(reason)


@pytest.fixture(scope="session")
def client() -> Iterator[Any]:
    """A real two-process Dask cluster on 127.0.0.1, shared by every test that runs jobs on
    one (started once: a cluster costs seconds on two cores)."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=40,
    )
    with Client(cluster) as connected:
        yield connected
    cluster.close()


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    from tests.support.object_store_servers import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gcs() -> Iterator[Any]:
    from tests.support.object_store_servers import GcsServer

    server = GcsServer()
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.conformant_endpoint
    yield server
    server.stop()
