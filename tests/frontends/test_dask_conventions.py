"""The Python API behaves as Dask users expect, on a real two-process `LocalCluster`: what
`convert(...)` is given stays with the pending job (`.compute()` overrides it), the client the
user made current runs the job when none is named, the manifest says which cluster ran it, and
`dask.compute` / `dask.persist` of a pending job refuse, pointing at `.compute()`."""

from __future__ import annotations

import pathlib
from typing import Any

import dask
import pytest
from distributed import get_task_stream

from shardwright import api
from shardwright.errors import PlanError
from tests.support import volumes

OPTIONS: dict[str, Any] = dict(resolution=(4, 4, 40), chunk_size=(16, 16, 8), min_shards=4)


@pytest.fixture
def source(tmp_path: pathlib.Path) -> str:
    return volumes.saved(tmp_path, "vol", volumes.noise((16, 32, 32), seed=1))


def test_the_users_client_runs_a_pending_job_with_its_settings(
    client: Any, source: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = api.convert(source, str(tmp_path / "out"), client=client, compute=False,
                          progress=False, **OPTIONS)  # fmt: skip
    assert isinstance(pending, api.PendingConversion)
    capsys.readouterr()
    with get_task_stream(client) as stream:
        manifest = pending.compute()  # nothing given here: convert's client and progress
    assert len({task["key"] for task in stream.data}) >= manifest.totals.shards >= 4
    assert client.scheduler.address in manifest.cluster
    assert capsys.readouterr().err == ""  # progress=False was kept


def test_compute_overrides_what_convert_was_given(
    client: Any, source: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = api.convert(source, str(tmp_path / "out"), client=client, compute=False,
                          progress=False, **OPTIONS)  # fmt: skip
    assert isinstance(pending, api.PendingConversion)
    manifest = pending.compute(client=None, scheduler="sync", progress=True)
    assert manifest.cluster == "this process, one task at a time (no Dask cluster)"
    assert "shards" in capsys.readouterr().err  # the progress line asked for here


def test_the_current_client_runs_the_job_when_none_is_named(
    client: Any, source: str, tmp_path: pathlib.Path
) -> None:
    from distributed import default_client

    assert default_client() is client  # the fixture's client is the current one
    with get_task_stream(client) as stream:
        manifest = api.convert(source, str(tmp_path / "out"), progress=False, **OPTIONS)
    assert isinstance(manifest, api.Manifest)
    assert manifest.cluster.startswith(f"the Dask cluster at {client.scheduler.address}")
    assert stream.data
    # Named otherwise, the job runs elsewhere: here in threads of this process.
    again = api.convert(source, str(tmp_path / "again"), scheduler="threads", progress=False,
                        **OPTIONS)  # fmt: skip
    assert isinstance(again, api.Manifest) and "threads of this process" in str(again.cluster)


def test_dask_compute_and_persist_point_at_compute(source: str, tmp_path: pathlib.Path) -> None:
    pending = api.convert(source, str(tmp_path / "out"), scheduler="sync", compute=False,
                          progress=False, **OPTIONS)  # fmt: skip
    for call in (dask.compute, dask.persist):
        with pytest.raises(PlanError, match=r"not a Dask collection.*call \.compute\(\)"):
            call(pending)
    assert not (tmp_path / "out").exists()  # nothing was written
    assert pending.compute().totals.shards >= 4
