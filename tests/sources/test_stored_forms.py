"""Objects as CloudVolume/CloudFiles store them, read back by `sources/stored_forms.py`:
bytes its encoding recognizes kept as they are, a gzip (one member or several), zstd or
brotli form undone, anything else refused naming what it is; a chunk found under whichever
suffix holds it, the suffix that last found one asked first."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Sequence
from pathlib import Path

import brotli
import pytest
import zstandard

from shardwright.sources.stored_forms import NotDecodable, StoredObjects, plain_bytes
from shardwright.stores import open_store
from shardwright.stores.local import LocalStore

CHUNK = b"CHUNK" + bytes(range(256)) * 8


def is_chunk(data: bytes) -> bool:
    return data.startswith(b"CHUNK")


@pytest.mark.parametrize(
    ("name", "packed"),
    [
        ("plain", CHUNK),
        ("gzip", gzip.compress(CHUNK)),
        ("two gzip members", gzip.compress(CHUNK[:100]) + gzip.compress(CHUNK[100:])),
        ("zstd", zstandard.ZstdCompressor().compress(CHUNK)),
        ("brotli", brotli.compress(CHUNK)),
    ],
)
def test_each_stored_form_reads_as_the_chunk(name: str, packed: bytes) -> None:
    assert plain_bytes(packed, is_chunk) == CHUNK, name


def test_a_compressed_form_of_something_else_is_refused_naming_its_compression() -> None:
    with pytest.raises(NotDecodable, match="gzip-compressed, but what it holds is not"):
        plain_bytes(gzip.compress(b"not a chunk"), is_chunk)
    with pytest.raises(NotDecodable, match="zstd-compressed"):
        plain_bytes(zstandard.ZstdCompressor().compress(b"not a chunk"), is_chunk)


def test_bytes_of_no_form_are_refused_naming_their_size() -> None:
    with pytest.raises(NotDecodable, match="7 bytes that are neither"):
        plain_bytes(b"garbage", is_chunk)


class CountedStore(LocalStore):
    """A local store that keeps the key batches it was asked for."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.asked: list[list[str]] = []

    def read_many(self, keys: Sequence[str], *, small: bool = False) -> dict[str, bytes | None]:
        self.asked.append(list(keys))
        return super().read_many(keys, small=small)


def test_chunks_are_found_under_their_suffix_which_is_then_asked_first(tmp_path: Path) -> None:
    counted = CountedStore(str(tmp_path))
    counted.write_object("1_1_1/0-64_0-64_0-64.gz", gzip.compress(CHUNK))
    counted.write_object("1_1_1/64-128_0-64_0-64.gz", gzip.compress(CHUNK))
    counted.write_object("1_1_1/0-64_64-128_0-64", CHUNK)
    objects = StoredObjects(counted)
    found = objects.get_many(["1_1_1/0-64_0-64_0-64", "1_1_1/0-64_64-128_0-64", "1_1_1/x"])
    assert found["1_1_1/0-64_64-128_0-64"] == CHUNK
    assert plain_bytes(found["1_1_1/0-64_0-64_0-64"] or b"", is_chunk) == CHUNK
    assert found["1_1_1/x"] is None  # no form of it: every suffix asked
    assert counted.asked == [
        ["1_1_1/0-64_0-64_0-64", "1_1_1/0-64_64-128_0-64", "1_1_1/x"],
        ["1_1_1/0-64_0-64_0-64.gz", "1_1_1/x.gz"],
        *[[f"1_1_1/x{suffix}"] for suffix in (".br", ".zstd", ".zst")],
    ]  # each form asked once for the keys still missing
    counted.asked.clear()
    assert objects.get_many(["1_1_1/64-128_0-64_0-64"])["1_1_1/64-128_0-64_0-64"] is not None
    assert counted.asked == [["1_1_1/64-128_0-64_0-64.gz"]]  # one request, not two
    assert objects.stored_form("1_1_1/64-128_0-64_0-64") == "1_1_1/64-128_0-64_0-64.gz"
    assert objects.stored_form("1_1_1/x") is None


def test_stored_objects_travel_to_workers_with_their_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    store.write_object("a.br", brotli.compress(CHUNK))
    travelled = pickle.loads(pickle.dumps(StoredObjects(store)))
    assert plain_bytes(travelled.get_many(["a"])["a"] or b"", is_chunk) == CHUNK
