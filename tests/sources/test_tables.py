"""Annotation tables as labs hold them (CSV, Parquet, pandas and Dask DataFrames): their
columns checked by name and type, their rows in one pass, and every problem said in one line
naming the column and the row."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shardwright.errors import SourceError
from shardwright.sources.table_spool import TableSpool
from shardwright.sources.tables import TableFacts, inspect_table
from shardwright.sources.tables_open import Table, is_table, open_table
from shardwright.sources.tables_values import segment_ids
from tests.support.tables import FORMS, table_as

RELATED = {"pre": "pre_segment", "post": "post_segment"}


def _inspect(table: Table, kind: str = "point", *args: Any, **kw: Any) -> TableFacts:
    spool = TableSpool(buckets=len(table.pieces))
    try:
        return inspect_table(table, kind, "t", spool, *args, **kw)
    finally:
        spool.close()


def _synapses(rows: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "id": np.arange(1, 1 + rows, dtype=np.uint64) * np.uint64(2**56),
        "x": rng.uniform(0, 100, rows), "y": rng.uniform(-5, 50, rows),
        "z": rng.integers(0, 30, rows),
        "pre_segment": rng.integers(1, 2**40, rows, dtype=np.uint64),
        "post_segment": rng.integers(0, 2**40, rows, dtype=np.uint64),
        "score": rng.random(rows), "kind": rng.integers(0, 4, rows),
        "size": rng.integers(-40_000, 40_000, rows), "flag": rng.random(rows) > 0.5,
    })  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_a_table_of_synapses_is_read_with_its_properties_typed(
    tmp_path: pathlib.Path, form: str
) -> None:
    frame = _synapses()
    source = table_as(form, frame, tmp_path, "t")
    assert is_table(source)
    table = open_table(source)
    facts = _inspect(table, "point", RELATED)
    assert facts.rows == 50 and facts.columns.id == "id"
    assert dict(facts.columns.relationships) == RELATED
    types = {column: p.type for column, p in facts.columns.properties}
    assert types == {"score": "float32", "kind": "uint8", "size": "int32", "flag": "uint8"}
    np.testing.assert_allclose(facts.low, frame[["x", "y", "z"]].min().to_numpy())
    np.testing.assert_allclose(facts.high, frame[["x", "y", "z"]].max().to_numpy())


def _refused(tmp_path: pathlib.Path, form: str, frame: pd.DataFrame, **kw: Any) -> str:
    with pytest.raises(SourceError) as caught:
        table = open_table(table_as(form, frame, tmp_path, "t"))
        _inspect(table, kw.pop("kind", "point"), kw.pop("relationships", RELATED), **kw)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("form", FORMS)
def test_hostile_tables_are_refused_in_one_line_naming_column_and_row(
    tmp_path: pathlib.Path, form: str
) -> None:
    good = _synapses(8)
    assert "no column 'z'" in _refused(tmp_path, form, good.drop(columns="z"))
    assert "no column 'rx'" in _refused(tmp_path, form, good, kind="ellipsoid")

    nan = good.copy()
    nan.loc[3, "y"] = np.nan
    assert "row 4: column 'y' is empty" in _refused(tmp_path, form, nan)

    text = good.astype({"x": str})  # a column of text (as Parquet stores it: typed)
    text.loc[5, "x"] = "12,5"
    assert "row 6: column 'x' holds '12,5', not a finite number" in _refused(tmp_path, form, text)

    repeated = good.copy()
    repeated.loc[6, "id"] = repeated.loc[1, "id"]
    message = _refused(tmp_path, form, repeated)
    assert f"rows 2 and 7 share the id {repeated.loc[1, 'id']}" in message

    negative = good.astype({"pre_segment": np.int64})
    negative.loc[2, "pre_segment"] = -4
    assert "row 3: column 'pre_segment' holds -4, a negative number" in _refused(
        tmp_path, form, negative
    )

    wide = good.astype({"size": np.int64})
    wide.loc[0, "size"] = 2**40
    assert "column 'size' holds values from" in _refused(tmp_path, form, wide)

    assert "cannot name a Neuroglancer property" in _refused(
        tmp_path, form, good.rename(columns={"score": "Score"})
    )


def test_an_id_beyond_64_bits_in_a_csv_is_named(tmp_path: pathlib.Path) -> None:
    (tmp_path / "t.csv").write_text("id,x,y,z\n1,0,0,0\n18446744073709551616,1,1,1\n3,2,2,2\n")
    with pytest.raises(
        SourceError, match=r"row 2: column .id. holds .18446744073709551616., not a"
    ):
        table = open_table(str(tmp_path / "t.csv"))
        _inspect(table)


def test_a_missing_table_is_one_line(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SourceError, match="source does not exist|cannot read the table"):
        table = open_table(str(tmp_path / "none.csv"))
        _inspect(table)


def test_repeated_ids_across_partitions_name_the_earliest_second_row() -> None:
    """Ids are checked bucket by bucket from the spool, not by one count of every id: the
    pair reported is the one a reader scanning down the table meets first."""
    import dask.dataframe as dd

    frame = _synapses(300)
    frame.loc[250, "id"] = frame.loc[10, "id"]  # second row 251
    frame.loc[120, "id"] = frame.loc[200, "id"]  # second row 201 (the first met)
    frame.loc[290, "id"] = frame.loc[200, "id"]
    table = open_table(dd.from_pandas(frame, npartitions=4, sort=False))
    with pytest.raises(SourceError, match=rf"rows 121 and 201 share the id {frame.loc[200, 'id']}"):
        _inspect(table, "point", RELATED)
    spool = TableSpool(buckets=3)
    ids = np.arange(1, 101, dtype=np.uint64)
    spool.keep(0, ids[:60], np.zeros((60, 3)), np.zeros((60, 3)))
    spool.keep(1, ids[60:], np.zeros((40, 3)), np.zeros((40, 3)))
    assert spool.first_repeated_id([60, 40]) is None
    assert spool.ids(1, 60, 40)[0] == 61
    spool.close()
    assert not spool.root.exists()


@pytest.mark.parametrize(
    ("values", "ids", "gaps", "problem"),
    [
        (pd.array([2**64 - 1, None, 5], dtype="UInt64"), [2**64 - 1, 0, 5], [1], None),
        (pd.Series(["18446744073709551615", " 12 ", "", None, "7.0"], dtype="string"),
         [2**64 - 1, 12, 0, 0, 7], [2, 3], None),
        (pd.Series(["1", "18446744073709551616"]), None, None,
         (1, "holds '18446744073709551616', not a uint64 id")),
        (pd.Categorical([2**63 + 1, None, 4]), [2**63 + 1, 0, 4], [1], None),
        (pd.array([3, -2], dtype="int64[pyarrow]"), None, None, (1, "holds -2, a negative number")),
        (np.array([1.0, np.nan, 2.0**53 - 1]), [1, 0, 2**53 - 1], [1], None),
        (np.array([1.0, 2.5]), None, None, (1, "holds 2.5, not a whole number")),
        (np.array([2.0**53]), None, None, (0, "holds 9007199254740992 in a floating-point column")),
    ],
)  # fmt: skip
def test_segment_ids_are_read_exactly_whatever_holds_them(
    values: Any, ids: list[int] | None, gaps: list[int] | None, problem: tuple[int, str] | None
) -> None:
    """Integers of any type as they are, text digit by digit (a CSV's id columns), floats
    only where exact; a gap is missing (a relationship's 'none'), never a number."""
    read = segment_ids(pd.Series(values))
    if problem is None:
        assert read.problem is None and read.values.dtype == np.uint64
        assert read.values.tolist() == ids
        assert np.flatnonzero(read.missing).tolist() == gaps
    else:
        assert read.problem is not None and read.problem[0] == problem[0]
        assert read.problem[1].startswith(problem[1])


def test_a_parquet_glob_reads_its_files_in_counting_order(tmp_path: pathlib.Path) -> None:
    for number in (10, 2, 1):
        pd.DataFrame({"x": [float(number)]}).to_parquet(tmp_path / f"part.{number}.parquet")
    table = open_table(str(tmp_path / "part.*.parquet"))
    assert table.files == (("part.1.parquet", 0), ("part.2.parquet", 0), ("part.10.parquet", 0))
    assert table.frame.compute()["x"].tolist() == [1.0, 2.0, 10.0]
    assert table.rows_name((0, 2), [1, 1, 1]) == "part.1.parquet row 1 and part.10.parquet row 1"
