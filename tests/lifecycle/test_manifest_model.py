"""The typed manifest, receipts and journal entries: JSON only at the storage boundary, the
same JSON as before they were typed, and anything malformed refused or left unproven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardwright.common.receipts import Receipt, ShardEntry
from shardwright.errors import ManifestError
from shardwright.lifecycle.journal import Journaled
from shardwright.lifecycle.manifest import (
    CompanionTotals,
    Manifest,
    Totals,
    build_manifest,
    owned_keys,
    parse_manifest,
)

PLAN = {"format": "zarr3", "destination": "out", "levels": [{"level": 0}, {"level": 1}]}


def _receipts() -> list[Receipt]:
    absent = dict(missing=2, missing_examples=("c/1",))  # source chunks written as fill
    return [
        Receipt("0/c/1", 30, 7, 3, requests={"puts": 2}, level=0, **absent),
        Receipt("0/c/0", 10, 5, 2, resumed=True, requests={"gets": 4, "heads": 1}, level=0),
        Receipt.nothing_stored("0/c/2"),
        Receipt("1/c/0", 8, 9, 1, requests={"puts": 1}, level=1),
    ]


def test_a_manifest_lists_what_was_stored_in_key_order_with_the_totals() -> None:
    manifest = build_manifest(
        PLAN,
        _receipts(),
        2.0,
        [{"puts": 1}],
        companions=[CompanionTotals("out/mesh", Totals(shards=1, bytes=9, chunks=4))],
        job="abc",
        metadata={"zarr.json": "0" * 64},
        cluster="the Dask cluster at tcp://10.0.0.1:8786 (2 worker(s), 4 thread(s))",
    )
    document = manifest.to_json()
    assert document["cluster"].startswith("the Dask cluster at tcp://10.0.0.1:8786")
    assert list(document) == [
        "shardwright_version", "format", "dataset", "created", "cluster", "job", "metadata",
        "plan", "totals", "shards", "companions",
    ]  # fmt: skip
    assert [s["key"] for s in document["shards"]] == ["0/c/0", "0/c/1", "1/c/0"]
    assert document["shards"][0] == {"key": "0/c/0", "size": 10, "crc32c": 5, "chunks": 2}
    assert document["totals"] == {
        "shards": 3,
        "bytes": 48,
        "chunks": 6,
        "resumed_shards": 1,
        "empty_shards_skipped": 1,
        "seconds": 2.0,
        "requests": {"puts": 4, "gets": 4, "heads": 1},
        "source_chunks_missing": 2,
        "source_chunks_missing_examples": ["c/1"],
        "levels": [
            {"level": 0, "shards": 2, "bytes": 40, "chunks": 5},
            {"level": 1, "shards": 1, "bytes": 8, "chunks": 1},
        ],
    }
    assert document["companions"]["out/mesh"]["chunks"] == 4
    assert manifest.companions["out/mesh"].shards == 1
    assert manifest.dataset == "volume" and manifest.totals.levels[1].bytes == 8
    text = json.dumps(document, indent=1)
    assert json.dumps(parse_manifest(text).to_json(), indent=1) == text  # read back: same JSON


def test_a_volume_without_levels_or_companions_has_neither() -> None:
    receipts = [Receipt(r.key, r.size, r.crc32c, r.chunks, r.empty) for r in _receipts()]
    document = build_manifest(PLAN, receipts).to_json()
    assert "companions" not in document and "levels" not in document["totals"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("x", r"shards\[0\] is not an object"),
        ({"key": "../up", "size": 1, "crc32c": 1, "chunks": 1}, "not a key inside"),
        ({"key": "a", "size": -1, "crc32c": 1, "chunks": 1}, r"shards\[0\].size is -1"),
        ({"key": "a", "size": 1, "crc32c": 2**32, "chunks": 1}, r"crc32c is 4294967296"),
        ({"key": "a", "size": 1, "crc32c": 1, "chunks": True}, r"chunks is True"),
    ],
)
def test_malformed_shard_entries_are_refused(entry: Any, message: str) -> None:
    document = {"format": "precomputed", "plan": {}, "totals": {}, "shards": [entry]}
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(document)


def test_shard_entries_and_receipts_round_trip() -> None:
    entry = ShardEntry("a/b", 1, 2, 3)
    assert ShardEntry.from_json(entry.to_json(), "here") == entry
    for receipt in _receipts():
        assert Receipt.from_json(receipt.to_json()) == receipt
    kept = _receipts()[0].counting({"puts": 1, "gets": 2})
    assert kept.requests == {"puts": 3, "gets": 2}


def test_journal_entries_keep_their_json_and_refuse_what_we_did_not_write() -> None:
    entry = {"key": "c/0", "job": "j", "size": 5, "crc32c": 6, "chunks": 1, "empty": False}
    journaled = Journaled.from_json(entry)
    assert journaled is not None and journaled.to_json() == entry
    assert journaled.receipt() == Receipt("c/0", 5, 6, 1, resumed=True)
    for broken in ({**entry, "size": "5"}, {**entry, "empty": None}, {**entry, "job": 1}, [],
                   {**entry, "present": "3"}):  # fmt: skip
        assert Journaled.from_json(broken) is None


def test_generated_shards_count_their_segments_present_through_the_journal() -> None:
    """A generated shard's receipt counts the segments that must have an object there; a
    resumed job keeps the count from the journal, and the totals sum it (volumes have none)."""
    entry = {"key": "0.shard", "job": "j", "size": 5, "crc32c": 6, "chunks": 4, "empty": False,
             "present": 5}  # fmt: skip
    journaled = Journaled.from_json(entry)
    assert journaled is not None and journaled.to_json() == entry
    kept = journaled.receipt()
    assert kept.present == 5 and Receipt.from_json(kept.to_json()) == kept
    fresh = Receipt("1.shard", 7, 8, 3, present=3)
    document = build_manifest({"format": "precomputed"}, [kept, fresh]).to_json()
    assert document["totals"]["segments_present"] == 8 and document["totals"]["chunks"] == 7
    assert Totals.from_json(document["totals"]).segments_present == 8
    assert "segments_present" not in build_manifest(PLAN, _receipts()).to_json()["totals"]


def test_a_manifest_of_an_earlier_version_reads_with_its_dataset_inferred() -> None:
    """Before the `dataset` member and the typed totals: a mesh manifest names its object type
    in its plan; totals members added since take their defaults."""
    document = {
        "format": "precomputed",
        "plan": {"object_type": "meshes"},
        "totals": {"shards": 1, "bytes": 5, "chunks": 2, "seconds": 1.5},
        "shards": [{"key": "0.shard", "size": 5, "crc32c": 1, "chunks": 2}],
    }
    manifest = Manifest.from_json(document)
    assert manifest.dataset == "objects"
    assert manifest.totals == Totals(shards=1, bytes=5, chunks=2, seconds=1.5)
    assert Manifest.from_json({**document, "plan": {}}).dataset == "volume"


def test_a_manifest_before_the_metadata_member_owns_the_documents_its_format_always_has() -> None:
    """Without `metadata` (an earlier version's manifest), what the job stored is its shards
    and the documents its format's reader names: a precomputed `info`; a Zarr v3 group's
    `zarr.json` and each level array's. With it, the documents it names."""
    shards = [{"key": "0/c/0", "size": 5, "crc32c": 1, "chunks": 2}]
    totals = {"shards": 1, "bytes": 5, "chunks": 2, "seconds": 1.5}
    zarr = Manifest.from_json({"format": "zarr3", "plan": PLAN, "totals": totals, "shards": shards})
    assert owned_keys(zarr) == ["0/c/0", "zarr.json", "0/zarr.json", "1/zarr.json"]
    info = Manifest.from_json({"format": "precomputed", "plan": {"levels": [{"level": 0}]},
                               "totals": totals, "shards": shards})  # fmt: skip
    assert owned_keys(info) == ["0/c/0", "info"]
    named = Manifest.from_json({"format": "zarr3", "plan": PLAN, "totals": totals,
                                "shards": shards, "metadata": {"zarr.json": "0" * 64}})  # fmt: skip
    assert owned_keys(named) == ["0/c/0", "zarr.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"totals": {"shards": 1}}, "'totals' is not what this project writes"),
        ({"totals": {"shards": "x", "bytes": 1, "chunks": 1}}, "'totals' is not what"),
        ({"dataset": "tables"}, r"dataset 'tables' is not one of \('volume', 'objects'"),
        ({"companions": [1]}, "'companions' is not an object"),
    ],
)
def test_malformed_totals_and_kinds_are_refused(change: dict[str, Any], message: str) -> None:
    document = {
        "format": "zarr3",
        "plan": {},
        "totals": {"shards": 0, "bytes": 0, "chunks": 0},
        "shards": [],
        **change,
    }
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(document)
