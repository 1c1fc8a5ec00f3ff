"""Shared test settings: modest hypothesis budgets for a 2-core CI machine; the object-store
servers on 127.0.0.1, one of each per test module that asks for them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("SHARDWRIGHT_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("ci")


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    from object_store_servers import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gcs() -> Iterator[Any]:
    from object_store_servers import GcsServer

    server = GcsServer()
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.conformant_endpoint
    yield server
    server.stop()
