"""Conditional writes (`Store.expected`, `write_object(..., expected)`) on the stores that make
them, S3 and GCS: an object replaced only if it is still at the version looked up (S3's ETag,
GCS's generation), created only if it is still absent; another writer's change in between
is FileExistsError, and its bytes stand. On GCS a replacement smaller than one block is one
request of ours carrying `ifGenerationMatch`; a larger one is gcsfs's resumable upload,
which carries no generation but 0 (stores/fsspec_store.py)."""

from __future__ import annotations

import pathlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shardwright.stores import Store, open_store
from shardwright.stores.base import Expected
from tests.support.object_store_servers import FaultyProxy, GcsServer
from tests.support.store_backends import BACKENDS, open_backend

CONDITIONAL = BACKENDS[2:]  # s3, gcs


@pytest.fixture(params=CONDITIONAL)
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Store:
    url, options = open_backend(request.param, request, tmp_path)
    return open_store(url, options)


@pytest.fixture
def gcs_logged(gcs: GcsServer) -> Iterator[tuple[Store, FaultyProxy]]:
    """A store on the GCS emulator behind a conformance shim of its own, whose log is the
    requests this test made."""
    gcs.make_bucket("conditional")
    shim = FaultyProxy(gcs.endpoint, fault_rate=0.0, gcs_conformance=True)
    store = open_store(f"gs://conditional/{uuid.uuid4().hex[:12]}", gcs.options(shim.endpoint))
    yield store, shim
    shim.stop()


def _another_writer(store: Store) -> Store:
    """The same destination, opened as another process would."""
    return open_store(store.url, store.storage_options)


def test_a_replacement_at_the_version_looked_up_goes_through(store: Store) -> None:
    store.write_object("info", b'{"first": 1}')
    version = store.expected("info")
    assert version is not None and version.version is not None
    size, _ = store.write_object("info", b'{"second": 2}', version)
    assert size == 13
    assert store.read("info") == b'{"second": 2}'
    after = store.expected("info")
    assert after is not None and after.version not in (None, version.version)  # a new version


def test_a_replacement_after_another_writer_changed_the_object_fails(store: Store) -> None:
    store.write_object("info", b"as read at plan time")
    version = store.expected("info")
    _another_writer(store).write_object("info", b"the person's edit")
    with pytest.raises(FileExistsError):
        store.write_object("info", b"ours, from a stale read", version)
    assert store.read("info") == b"the person's edit"
    with pytest.raises(FileExistsError):  # pieces streamed take the same path
        store.write_object("info", lambda: iter([b"ours, ", b"in pieces"]), version)
    assert store.read("info") == b"the person's edit"
    again = store.expected("info")  # looked up again: it goes through
    store.write_object("info", b"ours, on the edit", again)
    assert store.read("info") == b"ours, on the edit"


def test_an_absent_object_is_created_only_if_still_absent(store: Store) -> None:
    assert store.expected("new") == Expected(None)
    store.write_object("new", b"created", store.expected("new"))
    assert store.read("new") == b"created"
    absent = store.expected("other")
    _another_writer(store).write_object("other", b"created by another writer")
    with pytest.raises(FileExistsError):
        store.write_object("other", b"ours", absent)
    assert store.read("other") == b"created by another writer"


@pytest.mark.gcs
def test_gcs_expects_the_generation_and_replaces_in_one_conditional_request(
    gcs_logged: tuple[Store, FaultyProxy],
) -> None:
    store, shim = gcs_logged
    store.write_object("info", b"before")
    version = store.expected("info")
    generation = store.filesystem().info(store.path("info"))["generation"]
    assert version == Expected(str(generation))
    del shim.log[:]
    store.write_object("info", b"after", version)
    assert _writes(shim.log) == [
        f"POST /upload/storage/v1/b/conditional/o?uploadType=multipart"
        f"&ifGenerationMatch={generation}"
    ]
    assert store.read("info") == b"after"
    del shim.log[:]
    with pytest.raises(FileExistsError, match="changed since it was looked up"):
        store.write_object("info", b"stale", version)  # the generation is gone
    assert len(_writes(shim.log)) == 1 and store.read("info") == b"after"


def _writes(log: list[str]) -> list[str]:
    """The requests of a log that write. One GET of the object was logged after the log was
    cleared, once, in a loaded CI run: the shim logs a request when its thread takes the
    connection, which under load can come after the lookup that sent it gave up on it
    (gcsfs's `info` also lists in parallel and drops what it does not need); the write's
    path sends no GET (the bytes buffered, then our one POST)."""
    return [line for line in log if not line.startswith(("GET ", "HEAD "))]


@pytest.mark.gcs
def test_gcs_replacements_larger_than_a_block_go_up_resumable(gcs: GcsServer) -> None:
    """A replacement larger than one block is gcsfs's resumable upload, which carries no
    generation but 0: made, whole, under the generation looked up, but not conditional on it
    (as S3's multipart uploads are not relied on); creation only if absent holds at any size."""
    gcs.make_bucket("resumable-conditional")
    shim = FaultyProxy(gcs.endpoint, fault_rate=0.0, gcs_conformance=True)
    options: dict[str, Any] = gcs.options(shim.endpoint) | {"block_size": 2**18}
    store = open_store("gs://resumable-conditional/big", options)
    try:
        large = bytes(range(256)) * 4096  # 1 MiB: four blocks
        store.write_object("shard", b"small")
        version = store.expected("shard")
        del shim.log[:]
        store.write_object("shard", lambda: iter([large[: 2**19], large[2**19 :]]), version)
        assert store.read("shard") == large
        assert any("uploadType=resumable" in line for line in shim.log)
        assert not any(re.search(r"ifGenerationMatch=[1-9]", line) for line in shim.log)
        _another_writer(store).write_object("shard", b"another writer's")
        store.write_object("shard", large[::-1], version)  # stale, not refused: unconditional
        assert store.read("shard") == large[::-1]
        absent = store.expected("created")
        _another_writer(store).write_object("created", b"another writer's")
        with pytest.raises(FileExistsError):
            store.write_object("created", large, absent)
        assert store.read("created") == b"another writer's"
    finally:
        shim.stop()
