"""Segment properties from a table, written beside a segmentation by its job: the info names
the folder, the inline document holds each id once with its label, description, tags and
numbers in id order as the table gave them, and bad tables are refused in one line."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from shardwright import api
from shardwright.errors import DestinationError, LeaseHeld, PlanError, SourceError
from shardwright.lifecycle.lease import Lease
from shardwright.stores import open_store

RUN = dict(scheduler="sync", progress=False, resolution=(8, 8, 40))


def _segmentation(tmp_path: pathlib.Path) -> str:
    labels = np.random.default_rng(0).integers(1, 6, (8, 16, 16), dtype=np.uint64)
    np.save(tmp_path / "seg.npy", labels)
    return str(tmp_path / "seg.npy")


def test_a_table_of_cell_labels_becomes_the_segmentations_segment_properties(
    tmp_path: pathlib.Path,
) -> None:
    table = pd.DataFrame({
        "id": np.array([5, 1, 2**63 + 7], np.uint64), "label": ["pyramidal", "basket", None],
        "description": ["L2/3", "", "glia?"], "tags": ["excitatory,cortex", "inhibitory", ""],
        "volume_um3": [1200.5, 340.25, 99.0], "synapses": [4000, 120, 0],
    })  # fmt: skip
    table.to_csv(tmp_path / "cells.csv", index=False)
    dest = tmp_path / "seg"
    api.convert(_segmentation(tmp_path), str(dest), segment_properties=str(tmp_path / "cells.csv"),
                **RUN)  # fmt: skip
    info = json.loads((dest / "info").read_text())
    assert info["segment_properties"] == "segment_properties"
    document = json.loads((dest / "segment_properties" / "info").read_text())
    assert document["@type"] == "neuroglancer_segment_properties"
    inline = document["inline"]
    assert inline["ids"] == ["5", "1", str(2**63 + 7)]
    by_id = {p["id"]: p for p in inline["properties"]}
    assert by_id["label"] == {"id": "label", "type": "label",
                              "values": ["pyramidal", "basket", ""]}  # fmt: skip
    assert by_id["description"]["values"] == ["L2/3", "", "glia?"]
    tags = by_id["tags"]
    assert tags["tags"] == ["cortex", "excitatory", "inhibitory"]
    assert tags["values"] == [[0, 1], [2], []]
    assert by_id["volume_um3"] == {"id": "volume_um3", "type": "number", "data_type": "float32",
                                   "values": [1200.5, 340.25, 99.0]}  # fmt: skip
    assert by_id["synapses"]["data_type"] == "uint16"
    assert api.verify(str(dest)).ok  # the document is one of the metadata the manifest proves


def test_segment_properties_tables_that_cannot_be_written_are_refused(
    tmp_path: pathlib.Path,
) -> None:
    source = _segmentation(tmp_path)
    pd.DataFrame({"label": ["a"]}).to_csv(tmp_path / "noid.csv", index=False)
    with pytest.raises(SourceError, match="no column 'id'"):
        api.convert(source, str(tmp_path / "a"), segment_properties=str(tmp_path / "noid.csv"),
                    **RUN)  # fmt: skip
    pd.DataFrame({"id": [3, 4, 3]}).to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(SourceError, match="rows 1 and 3 share the id 3"):
        api.convert(source, str(tmp_path / "b"), segment_properties=str(tmp_path / "twice.csv"),
                    **RUN)  # fmt: skip
    image = np.zeros((8, 8, 8), np.uint8)
    np.save(tmp_path / "image.npy", image)
    pd.DataFrame({"id": [3]}).to_csv(tmp_path / "one.csv", index=False)
    with pytest.raises(PlanError, match="segments of a precomputed segmentation"):
        api.convert(str(tmp_path / "image.npy"), str(tmp_path / "c"),
                    segment_properties=str(tmp_path / "one.csv"), **RUN)  # fmt: skip
    assert not any((tmp_path / name).exists() for name in "abc")


def test_segment_properties_are_added_to_a_finished_segmentation_without_converting_it(
    tmp_path: pathlib.Path,
) -> None:
    """`convert DEST --segment-properties TABLE`: the document and the info naming it
    written, the manifest proving both; not one shard touched; run again with another table
    it replaces what it wrote."""
    dest = tmp_path / "seg"
    api.convert(_segmentation(tmp_path), str(dest), **RUN)
    shards = {path: path.read_bytes() for path in dest.rglob("*.shard")}
    assert shards
    pd.DataFrame({"id": [1, 2], "label": ["a", "b"]}).to_csv(tmp_path / "first.csv", index=False)
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", str(dest), "--segment-properties",
         str(tmp_path / "first.csv")], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((dest / "info").read_text())["segment_properties"] == "segment_properties"
    assert api.verify(str(dest)).ok
    labels = pd.DataFrame({"id": [3], "label": ["c"]})
    api.add_segment_properties(str(dest), labels)
    document = json.loads((dest / "segment_properties" / "info").read_text())
    assert document["inline"]["ids"] == ["3"]
    assert api.verify(str(dest)).ok
    assert all(path.read_bytes() == data for path, data in shards.items())
    assert not list((dest / ".shardwright").glob("lease*"))  # released


def test_adding_segment_properties_where_they_cannot_go_is_refused(tmp_path: pathlib.Path) -> None:
    pd.DataFrame({"id": [3], "label": ["c"]}).to_csv(tmp_path / "one.csv", index=False)
    table = str(tmp_path / "one.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlanError, match="has no info, zarr.json or .zgroup: no dataset to add to"):
        api.add_segment_properties(str(tmp_path / "empty"), table)
    np.save(tmp_path / "image.npy", np.zeros((8, 8, 8), np.uint8))
    api.convert(str(tmp_path / "image.npy"), str(tmp_path / "image"), **RUN)
    with pytest.raises(PlanError, match="need a segmentation .integer labels., not an image"):
        api.add_segment_properties(str(tmp_path / "image"), table)
    dest = tmp_path / "seg"
    api.convert(_segmentation(tmp_path), str(dest), **RUN)
    with pytest.raises(SourceError, match="no column 'id'"):
        api.add_segment_properties(str(dest), pd.DataFrame({"label": ["x"]}))
    held = Lease(open_store(str(dest)), "another-job")
    held.acquire()
    try:
        with pytest.raises(LeaseHeld):
            api.add_segment_properties(str(dest), table)
    finally:
        held.release()
    (dest / "segment_properties").mkdir()
    (dest / "segment_properties" / "info").write_text("{}")  # someone else's
    with pytest.raises(PlanError, match="is there and shardwright did not write it"):
        api.add_segment_properties(str(dest), table)
    assert json.loads((dest / "segment_properties" / "info").read_text()) == {}
    assert "segment_properties" not in json.loads((dest / "info").read_text())
    done = subprocess.run([sys.executable, "-m", "shardwright", "convert", str(dest)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "DEST alone only with what it adds" in done.stderr
    assert "--generate-skeletons, --segment-properties, --mips" in done.stderr


def test_adding_segment_properties_stopped_before_the_info_goes_on_with_resume(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after its document and before the info (the process dying there is the same
    for the destination), the run left a document its record proves its own: the info and
    the manifest are as before, the same call with `resume` goes on, and the dataset
    verifies."""
    from shardwright.lifecycle import addition

    dest = tmp_path / "seg"
    api.convert(_segmentation(tmp_path), str(dest), **RUN)
    info = (dest / "info").read_bytes()
    labels = pd.DataFrame({"id": [1, 2], "label": ["a", "b"]})

    def stopped(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(addition, "write_root_last", stopped)
        with pytest.raises(KeyboardInterrupt):
            api.add_segment_properties(str(dest), labels)
    assert (dest / "segment_properties" / "info").exists()
    assert (dest / "info").read_bytes() == info  # names nothing yet
    assert api.verify(str(dest)).ok  # the dataset as it was
    with pytest.raises(DestinationError, match="did not finish; pass resume=True"):
        api.add_segment_properties(str(dest), labels)
    api.add_segment_properties(str(dest), labels, resume=True)
    assert api.verify(str(dest)).ok
    assert json.loads((dest / "info").read_text())["segment_properties"] == "segment_properties"
    assert not (dest / addition.RECORD).exists()
