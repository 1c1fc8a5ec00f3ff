"""What an addition asks of a dataset's format (`formats/<name>/adding.py`), found by the
format whose metadata document the dataset has: the root found in the formats' order, each
format's refusal of a root it cannot add to, and a root left as it was where no level is
added. The levels themselves are planned and written by the in-place e2e tests."""

from __future__ import annotations

import json
import pathlib

import pytest

from shardwright.additions.checks import read_root, root_document
from shardwright.errors import PlanError
from shardwright.planning.formats import driver, readers
from shardwright.stores import open_store


def _dataset(folder: pathlib.Path, documents: dict[str, object]) -> str:
    folder.mkdir()
    for key, document in documents.items():
        (folder / key).write_text(json.dumps(document))
    return str(folder)


GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}
ZATTRS = {"multiscales": [{"version": "0.4", "datasets": [{"path": "0"}]}]}


@pytest.mark.parametrize(
    ("documents", "format", "root"),
    [
        ({"info": {"scales": []}, "zarr.json": GROUP}, "precomputed", "info"),
        ({"zarr.json": GROUP}, "zarr3", "zarr.json"),
        ({".zgroup": {"zarr_format": 2}, ".zattrs": ZATTRS}, "zarr2", ".zattrs"),
    ],
)
def test_the_root_is_the_first_format_s_document_found(
    tmp_path: pathlib.Path, documents: dict[str, object], format: str, root: str
) -> None:
    store = open_store(_dataset(tmp_path / "d", documents))
    (reader, adding), key, text = read_root(store, "d")
    assert key == root and json.loads(text) == documents[root]
    assert reader is driver(format).reader and adding is driver(format).adding


@pytest.mark.parametrize(
    ("documents", "said"),
    [
        ({".zattrs": ZATTRS}, "has no info, zarr.json or .zgroup"),  # no .zgroup beside it
        ({".zgroup": {"zarr_format": 2}}, "a Zarr v2 group without .zattrs"),
        ({".zarray": {"zarr_format": 2}}, "a bare Zarr v2 array"),
        ({}, "has no info, zarr.json or .zgroup: no dataset to add to"),
    ],
)
def test_a_dataset_without_a_root_to_add_to_is_refused(
    tmp_path: pathlib.Path, documents: dict[str, object], said: str
) -> None:
    with pytest.raises(PlanError, match=said):
        read_root(open_store(_dataset(tmp_path / "d", documents)), "d")


@pytest.mark.parametrize(
    ("format", "root", "said"),
    [
        ("precomputed", {"type": "image"}, "d/info is no precomputed volume's info"),
        ("precomputed", [], "d/info is no precomputed volume's info"),
        ("zarr3", {"node_type": "array"}, "d/zarr.json is no group"),
        ("zarr2", {"bioformats2raw.layout": 3}, "d is a bioformats2raw container"),
        ("zarr2", {"multiscales": [{"version": "0.3"}]}, "its multiscales are OME-Zarr 0.3"),
        ("zarr2", {"multiscales": []}, r"d/\.zattrs lists no OME-Zarr multiscales"),
    ],
)
def test_each_format_refuses_a_root_it_cannot_add_to(format: str, root: object, said: str) -> None:
    adding = driver(format).adding
    assert adding is not None
    with pytest.raises(PlanError, match=said):
        root_document(json.dumps(root).encode(), "d", "root", adding)


def test_a_root_gains_nothing_where_no_level_is_added() -> None:
    """Without levels, each format's root is returned as it was (a precomputed info with
    the directories an addition names already merged in)."""
    roots = {"precomputed": {"scales": [{"key": "8_8_8"}], "mesh": "mesh"},
             "zarr3": GROUP, "zarr2": ZATTRS}  # fmt: skip
    for name, root in roots.items():
        adding = driver(name).adding
        assert adding is not None
        assert adding.with_levels(root, None, ()) == root
        assert adding.names_companions == (name == "precomputed")
    assert [name for name, _ in readers() if driver(name).adding is not None] == list(roots)
