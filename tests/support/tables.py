"""A table as labs hand it over: a CSV or Parquet file, a pandas or Dask DataFrame; and a
segment properties document read back as Neuroglancer reads it."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

FORMS = ["csv", "parquet", "pandas", "dask"]
# Neuroglancer's number data types for segment properties (uint64 it refuses), as the typed
# arrays its `parseInlinePropertyMap` makes of the values.
NUMBER_ARRAYS = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16,
                 "uint32": np.uint32, "int32": np.int32, "float32": np.float32}  # fmt: skip


def table_as(form: str, frame: pd.DataFrame, folder: pathlib.Path, name: str = "table") -> Any:
    """`frame` in one of FORMS: a file written in `folder`, or a DataFrame (Dask's in
    several partitions)."""
    if form == "csv":
        frame.to_csv(folder / f"{name}.csv", index=False)
        return str(folder / f"{name}.csv")
    if form == "parquet":
        frame.to_parquet(folder / f"{name}.parquet", index=False)
        return str(folder / f"{name}.parquet")
    if form == "dask":
        return dd.from_pandas(frame, npartitions=3)
    return frame


def read_segment_properties(dest: pathlib.Path) -> dict[int, dict[str, Any]]:
    """The segment properties beside the segmentation at `dest`, as Neuroglancer's frontend
    (`parseInlinePropertyMap`) reads them: the info names the folder, the document is strict
    JSON (no NaN), every property's type is one it knows, each has one value per id, and a
    number's values are cast to its data type's typed array (a value that does not survive
    the cast is a value Neuroglancer would show otherwise). Returns id -> property -> value
    (tags as their names)."""
    folder = json.loads((dest / "info").read_text())["segment_properties"]
    document = json.loads((dest / folder / "info").read_text(), parse_constant=_no_constant)
    assert document["@type"] == "neuroglancer_segment_properties"
    inline = document["inline"]
    ids = [int(text) for text in inline["ids"]]
    assert all(
        0 <= i < 2**64 and str(i) == text for i, text in zip(ids, inline["ids"], strict=True)
    )
    found: dict[int, dict[str, Any]] = {i: {} for i in ids}
    for prop in inline["properties"]:
        kind, values = prop["type"], prop["values"]
        assert kind in ("label", "description", "string", "tags", "number"), kind
        assert isinstance(prop["id"], str) and len(values) == len(ids)
        if kind == "number":
            typed = np.asarray(values, dtype=np.float64).astype(NUMBER_ARRAYS[prop["data_type"]])
            np.testing.assert_array_equal(typed.astype(np.float64), values)  # survives the cast
            values = typed.tolist()
        elif kind == "tags":
            values = [[prop["tags"][n] for n in row] for row in values]
        else:
            assert all(isinstance(v, str) for v in values)
        for segment, value in zip(ids, values, strict=True):
            found[segment][prop["id"]] = value
    return found


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} is no JSON: Neuroglancer's JSON.parse refuses the document")
