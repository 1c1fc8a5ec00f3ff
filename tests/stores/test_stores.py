"""One contract, every backend: a local folder, memory://, moto's S3 server and the GCS
emulator answer the same operations the same way (whole objects, ranges, listings without
temporaries, deletion, creation only if absent), so the code above them never asks which
backend it has."""

from __future__ import annotations

import os
import pathlib
import pickle
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import pytest

from shardwright.errors import StoreError
from shardwright.stores import Store, open_store
from shardwright.stores.base import TMP_MARKER
from shardwright.stores.fsspec_store import FsspecStore
from shardwright.stores.local import LocalStore
from shardwright.stores.memory import MemoryStore
from tests.support.store_backends import BACKENDS, open_backend

KINDS = {"local": LocalStore, "memory": MemoryStore, "s3": FsspecStore, "gcs": FsspecStore}


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    url, options = open_backend(request.param, request, tmp_path)
    opened = open_store(url, options)
    yield opened
    if request.param == "memory":  # memory:// outlives the test: leave it empty
        for key in opened.list_keys():
            opened.delete(key)


def _backend(store: Store) -> str:
    if store.is_local:
        return "local"
    if store.is_process_local:
        return "memory"
    return "s3" if store.url.startswith("s3://") else "gcs"


def _failing_pieces() -> Iterator[bytes]:
    yield b"the first half of a new object"
    raise RuntimeError("the producer failed midway")


class TestEveryBackend:
    def test_the_url_picks_the_backend_and_pickles_as_url_options_and_writer(
        self, store: Store
    ) -> None:
        assert type(store) is KINDS[_backend(store)]
        assert store.is_local == (_backend(store) == "local")
        assert store.is_process_local == (_backend(store) == "memory")
        writer = store.with_writer("r" * 32)
        assert type(writer) is type(store) and writer.writer == "r" * 32
        assert writer.requests is store.requests  # counted together
        copy = pickle.loads(pickle.dumps(writer))
        assert type(copy) is type(store)
        assert (copy.url, copy.storage_options, copy.writer) == (
            store.url,
            store.storage_options,
            "r" * 32,
        )
        assert copy.requests is not store.requests  # a worker counts its own
        assert store.path("a/b") == f"{store.root}/a/b" and store.path("") == store.root

    def test_an_object_reads_back_whole_and_in_ranges(self, store: Store) -> None:
        data = bytes(range(256)) * 4
        assert store.write_object("a/b/c.bin", data) == (len(data), crc32c.crc32c(data))
        assert store.read("a/b/c.bin") == data
        assert store.read_range("a/b/c.bin", 10, 20) == data[10:20]
        assert store.read_range("a/b/c.bin", 1000, 5000) == data[1000:]
        assert store.read_range("a/b/c.bin", 7, 7) == b""
        assert store.read_range("a/b/c.bin", len(data), len(data) + 9) == b""  # past the end
        store.write_object("empty", b"")
        assert store.read_range("empty", 0, 1) == b""
        assert store.size("a/b/c.bin") == len(data)
        assert store.exists("a/b/c.bin") and not store.exists("a/b/missing")
        assert store.size("a/b/missing") is None
        with pytest.raises(FileNotFoundError):
            store.read("a/b/missing")
        with pytest.raises(FileNotFoundError):
            store.read_range("a/b/missing", 0, 4)
        store.write_text("notes.txt", "text, encoded")
        assert store.read("notes.txt") == b"text, encoded"

    def test_pieces_are_streamed_in_order_into_one_object(self, store: Store) -> None:
        pieces = [b"abc", bytearray(b"defg"), memoryview(b"hij")]
        size, crc = store.write_object("shard", lambda: iter(pieces))
        assert store.read("shard") == b"abcdefghij"
        assert (size, crc) == (10, crc32c.crc32c(b"abcdefghij"))
        store.write_object("empty", b"")
        assert store.read("empty") == b"" and store.size("empty") == 0

    def test_a_second_write_replaces_the_object_whole(self, store: Store) -> None:
        store.write_object("k", b"first version, the longer one")
        store.write_object("k", b"second")
        assert store.read("k") == b"second"
        assert store.list_keys() == ["k"]

    def test_a_write_that_fails_midway_leaves_the_previous_object(self, store: Store) -> None:
        store.write_object("d/k", b"old")
        with pytest.raises((RuntimeError, StoreError), match="failed midway"):
            store.write_object("d/k", _failing_pieces)
        with pytest.raises((RuntimeError, StoreError), match="failed midway"):
            store.write_object("d/new", _failing_pieces)
        assert store.read("d/k") == b"old"
        assert not store.exists("d/new")
        assert store.list_keys() == ["d/k"]
        if store.is_local:  # nor a temporary beside it
            assert os.listdir(os.path.join(store.root, "d")) == ["k"]

    def test_listings_are_relative_and_leave_temporaries_out(self, store: Store) -> None:
        for key, data in {"a": b"1", "d/b": b"22", "d/e/c": b"333"}.items():
            store.write_object(key, data)
        store.write_object(f"d/{TMP_MARKER}deadrun-0", b"a temporary a run left")
        assert store.list_keys() == ["a", "d/b", "d/e/c"]
        assert store.sizes_below() == {"a": 1, "d/b": 2, "d/e/c": 3}
        assert store.sizes_below("d") == {"d/b": 2, "d/e/c": 3}
        assert store.sizes_below("d/e/") == {"d/e/c": 3}
        assert store.sizes_below("missing") == {}
        assert store.list_sizes("d") == {"b": 2}
        assert store.list_sizes("") == {"a": 1}
        assert store.list_sizes("missing") == {}
        assert store.first_entry() is not None and not store.is_empty()
        assert not store.is_file()

    def test_read_many_maps_each_key_in_one_batch(self, store: Store) -> None:
        keys = [f"m/{i}" for i in range(6)]
        for i, key in enumerate(keys[:4]):
            store.write_object(key, b"x" * i)
        before = store.requests.snapshot()
        found = store.read_many([*keys, "m/3"])
        assert found == {**{k: b"x" * i for i, k in enumerate(keys[:4])}, "m/4": None, "m/5": None}
        assert "retries" not in store.requests.since(before)  # no key fell out of the batch
        assert store.read_many([]) == {}

    def test_delete_removes_one_object_and_nothing_else(self, store: Store) -> None:
        assert store.is_empty() and store.first_entry() is None and store.list_keys() == []
        store.write_object("x/y/z", b"1")
        store.write_object("x/w", b"2")
        store.delete("x/y/z")
        store.delete("x/y/z")  # gone already: nothing happens
        store.delete("never/was")
        assert store.list_keys() == ["x/w"] and not store.exists("x/y/z")
        store.delete("x/w")
        assert store.list_keys() == [] and store.is_empty()
        if store.is_local:  # the folders the removals emptied went with them
            assert os.listdir(store.root) == []

    def test_create_exclusive_creates_once(self, store: Store) -> None:
        store.create_exclusive(".shardwright/lease-000001.json", b'{"run": "first"}')
        assert store.read(".shardwright/lease-000001.json") == b'{"run": "first"}'
        with pytest.raises(FileExistsError):
            store.create_exclusive(".shardwright/lease-000001.json", b'{"run": "second"}')
        assert store.read(".shardwright/lease-000001.json") == b'{"run": "first"}'
        store.write_object("taken", b"by a plain write")
        with pytest.raises(FileExistsError):
            store.create_exclusive("taken", b"never")
        assert store.read("taken") == b"by a plain write"
        assert store.list_keys() == [".shardwright/lease-000001.json", "taken"]

    def test_of_racing_exclusive_creates_exactly_one_wins(self, store: Store) -> None:
        def attempt(i: int) -> Any:
            try:
                store.create_exclusive("race", f"{i}".encode())
                return i
            except FileExistsError:
                return None

        with ThreadPoolExecutor(6) as pool:
            winners = [i for i in pool.map(attempt, range(6)) if i is not None]
        assert len(winners) == 1
        assert store.read("race") == f"{winners[0]}".encode()

    def test_temporaries_carry_the_writer_and_stale_ones_are_removed(self, store: Store) -> None:
        writer = store.with_writer("live")
        seen: list[str] = []

        def pieces() -> Iterator[bytes]:
            if store.is_local:  # the object is written beside its key, under its run's name
                seen.extend(os.listdir(os.path.join(store.root, "1_1_1")))
            yield b"shard"

        writer.write_object("1_1_1/0.shard", pieces)
        assert writer.read("1_1_1/0.shard") == b"shard"
        if not store.is_local:
            # uploads leave no temporaries
            assert store.remove_stale_temporaries(nested_marker=".shardwright") == 0
            return
        assert [name.startswith(f"{TMP_MARKER}live-") for name in seen] == [True]
        folder = pathlib.Path(store.root, "1_1_1")
        (folder / f"{TMP_MARKER}dead-1").write_bytes(b"left by a killed run")
        (folder / f"{TMP_MARKER}live-2").write_bytes(b"being written by the holder")
        assert store.list_keys() == ["1_1_1/0.shard"]
        nested = pathlib.Path(store.root, "meshes")  # a dataset of its own: its marker folder
        (nested / ".shardwright").mkdir(parents=True)
        (nested / f"{TMP_MARKER}other-1").write_bytes(b"its own job's")
        assert store.remove_stale_temporaries(nested_marker=".shardwright", keep_writer="live") == 1
        assert sorted(os.listdir(folder)) == [f"{TMP_MARKER}live-2", "0.shard"]
        assert store.remove_stale_temporaries(nested_marker=".shardwright") == 1
        assert os.listdir(folder) == ["0.shard"]
        assert (nested / f"{TMP_MARKER}other-1").exists()  # not entered
        assert store.remove_stale_temporaries(nested_marker=None) == 1  # entered


@pytest.mark.s3
def test_an_object_read_as_small_is_one_request_on_s3(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's lease is read (as small) before every data object: s3fs's HEAD before each
    whole read (to split large objects) would double the round trips of every shard task's
    lease check."""
    import s3fs

    url, options = open_backend("s3", request, tmp_path)
    store = open_store(url, options)
    store.write_text(".shardwright/lease-000001.json", "{}")
    store.write_text("info", "{}")
    sized: list[str] = []
    info = s3fs.S3FileSystem._info

    async def counted(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        sized.append(path)
        return await info(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_info", counted)
    assert store.read(".shardwright/lease-000001.json", small=True) == b"{}"
    assert sized == []
    assert store.read("info") == b"{}"  # other objects: as s3fs reads them
    assert len(sized) == 1
