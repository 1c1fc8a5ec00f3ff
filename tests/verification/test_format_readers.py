"""What verify asks of a dataset's format (`FormatReader`, each format driver's
`verifying.py`), found by the metadata document the dataset has: on datasets a conversion
wrote, the shards its geometry names are those stored, each checked; on documents by hand,
whether any level is sharded, which documents a group names and its levels; another tool's
dataset found by its format's documents."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from shardwright import api
from shardwright.planning.formats import reader_of, readers
from shardwright.stores import open_store
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import dataset_of, holds_shards
from shardwright.verification.state import foreign_metadata


def test_each_metadata_document_names_its_format() -> None:
    assert reader_of({"info": {}})[0] == "precomputed"  # type: ignore[index]
    assert reader_of({"zarr.json": {}})[0] == "zarr3"  # type: ignore[index]
    assert reader_of({".zattrs": {}})[0] == "zarr2"  # type: ignore[index]
    assert reader_of({"attributes.json": {}}) is None


@pytest.mark.parametrize(
    ("documents", "sharded"),
    [
        ({"info": {"scales": [{"key": "1_1_1"}]}}, False),
        ({"info": {"scales": [{"key": "1_1_1"}, {"key": "2_2_1", "sharding": {}}]}}, True),
        ({"info": {"scales": "none"}}, True),  # malformed: dataset_of names it
        ({"zarr.json": {"node_type": "array", "codecs": [{"name": "bytes"}]}}, False),
        ({"zarr.json": {"node_type": "array", "codecs": [{"name": "sharding_indexed"}]}}, True),
        ({".zattrs": {"multiscales": []}}, False),
        ({"attributes.json": {}}, True),  # no format's: dataset_of names it
    ],
)
def test_whether_a_dataset_holds_shards_is_its_formats_answer(
    documents: dict, sharded: bool
) -> None:
    assert holds_shards(documents) is sharded


def test_documents_of_no_sharded_format_are_one_problem() -> None:
    report = VerifyReport("out", "zarr2")
    assert dataset_of(report, open_store("memory://readers"), {".zattrs": {}}) is None
    assert report.problems == [
        "the metadata does not describe a dataset: no sharded format's metadata among ['.zattrs']"
    ]


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("readers") / "v.npy"
    np.save(path, np.arange(32 * 32 * 16, dtype=np.uint16).reshape(16, 32, 32))
    return path


@pytest.mark.parametrize(("fmt", "key"), [("precomputed", "info"), ("zarr3", "zarr.json")])
def test_a_converted_datasets_shards_are_those_its_geometry_names(
    volume: pathlib.Path, fmt: str, key: str
) -> None:
    dest = volume.parent / fmt
    api.convert(str(volume), str(dest), format=fmt, chunk_size=(8, 8, 8), mips=1,
                scheduler="sync", progress=False)  # fmt: skip
    store = open_store(str(dest))
    name, reader = reader_of({key: None}) or ("", None)
    assert name == fmt and reader is not None
    documents = {key: json.loads(store.read(key))}
    for linked in reader.linked(documents[key]):
        documents[linked] = json.loads(store.read(linked))
    assert len(documents) == (1 if fmt == "precomputed" else 3)  # a group and its two levels
    report = VerifyReport(str(dest), fmt)
    dataset = dataset_of(report, store, documents)
    assert dataset is not None and report.ok
    assert dataset.listed == dataset.expected and len(dataset.expected) >= 2
    assert len(dataset.comparers) == 2  # one per level
    assert sum(dataset.check_shard(k).chunks for k in dataset.listed) == 4 * 4 * 2 + 2 * 2 * 1


def test_each_format_names_its_levels_finest_first() -> None:
    found = {name: reader for name, reader in readers()}
    info = {"scales": [{"key": "8_8_40"}, {"key": "16_16_40"}, "not a scale"]}
    assert found["precomputed"].levels(info) == ["8_8_40", "16_16_40"]
    group = {"node_type": "group", "attributes": {"ome": {"version": "0.5", "multiscales": [
        {"axes": [{"name": a, "type": "space"} for a in "zyx"],
         "datasets": [{"path": p, "coordinateTransformations": [
             {"type": "scale", "scale": [1.0, 1.0, 1.0]}]} for p in ("0", "1")]}]}}}  # fmt: skip
    assert found["zarr3"].levels(group) == ["0", "1"]
    assert found["zarr3"].levels({"node_type": "array"}) == []
    zattrs = {"multiscales": group["attributes"]["ome"]["multiscales"]}  # type: ignore[index]
    assert found["zarr2"].levels(zattrs) == ["0", "1"]


def test_another_tools_dataset_is_found_by_its_formats_documents(tmp_path: pathlib.Path) -> None:
    """`verify` of a destination no job wrote reads it by the first format whose documents are
    there: a Zarr v2 group only with its `.zgroup` beside its `.zattrs`."""
    store = open_store(str(tmp_path))
    assert foreign_metadata(store) is None
    store.write_object(".zattrs", b"{}")
    assert foreign_metadata(store) is None  # a .zattrs alone is no group
    store.write_object(".zgroup", b'{"zarr_format": 2}')
    assert foreign_metadata(store) == ".zattrs"
    store.write_object("zarr.json", b"{}")
    assert foreign_metadata(store) == "zarr.json"
    store.write_object("info", b"{}")
    assert foreign_metadata(store) == "info"
