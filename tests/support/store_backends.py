"""Every store backend as a place to test in: a local folder, memory://, a prefix of a bucket
on moto's S3 server and one on the GCS emulator (behind its conformance shim, which creates
objects exclusively as GCS does). Each call gives a fresh, empty root."""

from __future__ import annotations

import pathlib
import uuid
from typing import Any

import pytest

BACKENDS = [
    "local",
    "memory",
    pytest.param("s3", marks=pytest.mark.s3),
    pytest.param("gcs", marks=pytest.mark.gcs),
]
QUICK_BACKENDS = ["local", "memory"]


def open_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> tuple[str, dict[str, Any]]:
    """(url, storage options) of a new, empty root on backend `name`; the servers are the
    module's (started only for the backends a test asks for)."""
    unique = uuid.uuid4().hex[:12]
    if name == "local":
        return str(tmp_path / f"store-{unique}"), {}
    if name == "memory":
        return f"memory://stores-{unique}", {}
    if name == "s3":
        s3 = request.getfixturevalue("s3")
        s3.make_bucket("stores")
        return f"s3://stores/{unique}", s3.options()
    if name == "gcs":
        gcs = request.getfixturevalue("gcs")
        gcs.make_bucket("stores")
        return f"gs://stores/{unique}", gcs.options(gcs.conformant_endpoint)
    raise ValueError(name)
