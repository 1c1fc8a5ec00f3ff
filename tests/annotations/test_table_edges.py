"""Tables at their edges, as a lab hands them over (issue 55): every type of numbers pandas
and Arrow hold is a number, a missing segment is none and a missing property value a refusal
naming its row, Parquet folders with or without a suffix and with files that differ, CSV
headers with spaces; every refusal one line naming file, row and column and the option that
fixes it. Outputs are read back by Neuroglancer's own `AnnotationReader`, and segment
properties as Neuroglancer's frontend reads the document (tests/support/tables.py)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from neuroglancer.read_precomputed_annotations import AnnotationReader

from shardwright import api
from shardwright.errors import OptionError, SourceError
from tests.support.tables import FORMS, read_segment_properties, table_as

RUN: dict[str, Any] = dict(scheduler="sync", progress=False)
POINTS: dict[str, Any] = dict(annotation_type="point", resolution=(8, 8, 40))
FLAGS = ["--annotation-type", "point", "--resolution", "8,8,40", "--scheduler", "sync", "--quiet"]
BIG = 2**60 + 12345  # a segment id float64 cannot hold (its neighbours round to it)


def _points(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(101),
        "x": rng.uniform(0, 90, rows), "y": rng.uniform(0, 60, rows), "z": rng.uniform(0, 9, rows),
    })  # fmt: skip


def _props(reader: AnnotationReader, annotation: int) -> dict[str, float]:
    """An annotation's properties by name, as Neuroglancer's reader decodes its record."""
    values = reader.by_id[annotation].to_json()["props"]
    return dict(zip([p.id for p in reader.properties], values, strict=True))


def _segments(reader: AnnotationReader, annotation: int) -> list[list[int]]:
    return [[int(s) for s in related] for related in reader.by_id[annotation].to_json()["segments"]]


def _related(reader: AnnotationReader, name: str, segment: int) -> list[int]:
    index = reader.relationships[name]
    return sorted(int(a.id) for a in (index[segment] if segment in index else []))  # noqa: SIM401


def _cli(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardwright", *args], capture_output=True,
                          text=True, cwd=cwd)  # fmt: skip


def _one_line_refusal(done: subprocess.CompletedProcess[str]) -> str:
    """A refusal as the command line says it: exit 2 and one line, no library's wrapper."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Original Message" not in lines[0] and "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("form", FORMS)
def test_every_pandas_and_arrow_type_of_numbers_is_a_property(
    tmp_path: pathlib.Path, form: str
) -> None:
    """Nullable integers (signed, unsigned), Arrow-backed numbers, a categorical of numbers
    and pandas' boolean are properties with their values, narrowed; before, each was dropped
    and the plan said `properties none`."""
    frame = _points(40, seed=len(form))
    rng = np.random.default_rng(1)
    frame["count"] = pd.array(rng.integers(-300, 300, 40), dtype="Int64")
    frame["volume"] = pd.array(rng.integers(0, 70_000, 40), dtype="UInt64")
    frame["arrow_int"] = pd.array(rng.integers(0, 200, 40), dtype="int64[pyarrow]")
    frame["arrow_float"] = pd.array(rng.uniform(0, 1, 40), dtype="double[pyarrow]")
    frame["grade"] = pd.Categorical(rng.choice([1, 5, 9], 40))
    frame["flag"] = pd.array(rng.random(40) > 0.5, dtype="boolean")
    dest = tmp_path / "out"
    plan = api.plan(table_as(form, frame, tmp_path, "t"), str(dest), **POINTS)
    api.convert(plan, **RUN)
    reader = AnnotationReader(f"file://{dest}/")
    types = {p.id: p.type for p in reader.properties}
    assert types == {"count": "int16", "volume": "uint32", "arrow_int": "uint8",
                     "arrow_float": "float32", "grade": "uint8", "flag": "uint8"}  # fmt: skip
    fates = plan.describe()["columns"]
    assert {column: fates[column] for column in types} == {
        column: f"property ({kind})" for column, kind in types.items()}  # fmt: skip
    for row in frame.itertuples():
        got = _props(reader, int(row.id))
        names = ("count", "volume", "arrow_int", "grade", "flag")
        assert [got[name] for name in names] == [int(getattr(row, name)) for name in names]
        assert got["arrow_float"] == pytest.approx(float(row.arrow_float), rel=1e-6)


@pytest.mark.parametrize("form", ["csv", "parquet", "pandas"])
def test_a_missing_segment_is_no_segment_and_ids_stay_exact(
    tmp_path: pathlib.Path, form: str
) -> None:
    """A relationship column of pandas' UInt64 with gaps (was: refused, 'holds UInt64, not
    numbers'); in a CSV the gaps lie past the rows Dask samples for the column's type (was:
    a traceback of mismatched dtypes) and the ids are above 2**53 (a float64 column would
    round them): each gap is no segment, each id exact."""
    rows = 6000
    frame = _points(rows)
    frame["id"] = np.uint64(BIG) + np.arange(rows, dtype=np.uint64)
    pre = pd.array(np.uint64(BIG) + np.arange(rows, dtype=np.uint64) % np.uint64(7),
                   dtype="UInt64")  # fmt: skip
    gaps = [4500, 5000, 5999]
    pre[gaps] = pd.NA
    frame["pre"] = pre
    source = table_as(form, frame, tmp_path, "t")
    if form == "csv":  # the gaps past the sample Dask reads the column's type from
        assert pathlib.Path(source).stat().st_size > 256_000 * 1.5
    dest = tmp_path / "out"
    api.convert(source, str(dest), relationships=["pre=pre"], **POINTS, **RUN)
    reader = AnnotationReader(f"file://{dest}/")
    for row in [0, 1, 4499, *gaps]:
        expected = [] if row in gaps else [BIG + row % 7]
        assert _segments(reader, BIG + row) == [expected]
    linked = frame["id"].to_numpy()[~pd.isna(frame["pre"]).to_numpy() & (np.arange(rows) % 7 == 3)]
    assert _related(reader, "pre", BIG + 3) == sorted(linked.tolist())


def test_ids_in_a_float_column_above_2_53_are_refused_not_rounded() -> None:
    frame = _points(5)
    frame["pre"] = np.array([3.0, 2.0**60, 5.0, 6.0, 7.0])  # was: written, maybe rounded
    with pytest.raises(SourceError, match=r"row 2: column 'pre' holds 1152921504606846976 in a "
                       r"floating-point column, which rounds ids above 2\*\*53"):  # fmt: skip
        api.plan(frame, "memory://out", relationships=["pre=pre"], **POINTS)
    frame["pre"] = np.array([3.0, np.nan, 5.0, 6.0, 7.0])  # a gap is no segment
    assert api.plan(frame, "memory://out", relationships=["pre=pre"], **POINTS).facts.rows == 5


def test_a_missing_property_value_is_refused_naming_its_row_and_the_option(
    tmp_path: pathlib.Path,
) -> None:
    """A property with a gap, integer or float, has no value there: the refusal names the row
    and `--property COLUMN=VALUE` (was: an integer column silently dropped, a float's gap
    written as NaN unasked). Given, VALUE is written there (NaN for a float; a whole number for
    an integer, its type wide enough for it), the plan says so, Neuroglancer's reader reads it
    and verify compares the table, filled the same way, with every index."""
    frame = _points(12)
    frame["synapses"] = pd.array([4, 5, 6, 7, 8, 9, None, 1, 2, 3, 4, 5], dtype="Int64")
    with pytest.raises(SourceError) as refused:
        api.convert(frame, str(tmp_path / "a"), **POINTS, **RUN)
    assert str(refused.value) == (
        "the table: row 7: column 'synapses' is empty: each row of a property needs a value "
        "(fill it in, give properties synapses=VALUE to write VALUE, a number or nan, where it "
        "is empty, or leave the column out by naming the others with properties)"
    )
    frame["weight"] = pd.array([0.5] * 6 + [None] + [1.5] * 5, dtype="Float64")
    with pytest.raises(SourceError, match="^the table: row 7: column 'weight' is empty"):
        api.plan(frame, "memory://out", properties=["synapses=0", "weight"], **POINTS)
    with pytest.raises(SourceError, match="row 7: column 'synapses' is empty and nan, written "
                       "there, is no whole number, as an integer property needs"):  # fmt: skip
        api.plan(frame, "memory://out", properties=["synapses=nan", "weight=nan"], **POINTS)
    with pytest.raises(SourceError, match="'synapses=some': 'some' is no number"):
        api.plan(frame, "memory://out", properties=["synapses=some"], **POINTS)
    frame.to_csv(tmp_path / "t.csv", index=False)
    line = _one_line_refusal(_cli("convert", "t.csv", "out", *FLAGS, cwd=tmp_path))
    assert "t.csv: row 7: column 'synapses' is empty" in line
    assert "give --property synapses=VALUE to write VALUE" in line
    assert not (tmp_path / "a").exists() and not (tmp_path / "out").exists()
    fills = ["--property", "synapses=-1", "--property", "weight=nan"]
    planned = _cli("plan", "t.csv", "out", *FLAGS[:4], *fills, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert (
        "synapses: property (int8, -1 where empty); weight: property (float32, nan where "
        "empty)" in planned.stdout
    )
    done = _cli("convert", "t.csv", "out", *FLAGS, *fills, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reader = AnnotationReader(f"file://{tmp_path / 'out'}/")
    gap = _props(reader, int(frame["id"][6]))
    assert gap["synapses"] == -1 and np.isnan(gap["weight"])
    assert _props(reader, int(frame["id"][7])) == {"synapses": 1, "weight": 1.5}
    report = api.verify(str(tmp_path / "out"), against=str(tmp_path / "t.csv"))
    assert report.ok and any("compared with the 12 rows" in n for n in report.notes), report


def test_a_parquet_folder_as_dask_writes_it_without_a_suffix(tmp_path: pathlib.Path) -> None:
    """`df.to_parquet("synapses")` from Dask: a folder of part files and no suffix (was: 'no
    table'); converted, read back whole, and verified against the same folder."""
    frame = _points(900)
    frame["pre"] = np.arange(900, dtype=np.uint64) % 11
    dd.from_pandas(frame, npartitions=3).to_parquet(str(tmp_path / "synapses"))
    done = _cli("convert", "synapses", "out", *FLAGS, "--relationship", "pre=pre", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reader = AnnotationReader(f"file://{tmp_path / 'out'}/")
    assert sorted(int(a.id) for a in reader.get_within_spatial_bounds()) == frame["id"].tolist()
    assert _related(reader, "pre", 4) == frame["id"][frame["pre"] == 4].tolist()
    done = _cli("verify", "out", "--against", "synapses", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_parquet_files_that_differ_in_their_columns(tmp_path: pathlib.Path) -> None:
    """A folder whose files differ: the columns are the union, a column a file lacks is
    missing in its rows (was: a traceback, KeyError from Dask's reader); what cannot be
    joined or written is one line naming the file (and its row)."""
    folder = tmp_path / "synapses.parquet"
    folder.mkdir()
    frame = _points(30)
    frame["pre"] = np.arange(30, dtype=np.uint64) + np.uint64(1)
    frame["score"] = np.linspace(0, 1, 30)
    frame.iloc[:20].to_parquet(folder / "part.0.parquet", index=False)
    frame.iloc[20:].drop(columns=["pre", "score"]).to_parquet(folder / "part.1.parquet",
                                                              index=False)  # fmt: skip
    dest = tmp_path / "out"
    with pytest.raises(SourceError) as refused:  # a property with no value there
        api.plan(str(folder), str(dest), relationships=["pre=pre"], **POINTS)
    assert f"{folder}: part.1.parquet row 1: column 'score' is empty" in str(refused.value)
    api.convert(str(folder), str(dest), relationships=["pre=pre"], properties=["score=nan"],
                **POINTS, **RUN)  # fmt: skip
    reader = AnnotationReader(f"file://{dest}/")
    assert _segments(reader, int(frame["id"][3])) == [[4]]
    assert _segments(reader, int(frame["id"][25])) == [[]]  # its file has no 'pre'
    assert np.isnan(_props(reader, int(frame["id"][25]))["score"])
    assert api.verify(str(dest), against=str(folder)).ok

    counts = frame.assign(synapses=np.arange(30))  # an integer property one file lacks
    counts.iloc[:20].to_parquet(folder / "part.0.parquet", index=False)
    with pytest.raises(SourceError) as refused:
        api.plan(str(folder), str(tmp_path / "x"), relationships=["pre=pre"],
                 properties=["score=nan", "synapses"], **POINTS)  # fmt: skip
    assert f"{folder}: part.1.parquet row 1: column 'synapses' is empty" in str(refused.value)

    frame.iloc[20:].assign(pre="none").to_parquet(folder / "part.1.parquet", index=False)
    differ = r": column 'pre' is uint64 in part.0.parquet and (large_)?string in part.1.parquet"
    with pytest.raises(SourceError, match=differ + ": write every file with one type"):
        api.plan(str(folder), str(tmp_path / "x"), **POINTS)
    (folder / "part.1.parquet").write_text("x,y,z\n1,2,3\n")
    with pytest.raises(SourceError, match=r"synapses.parquet: part.1.parquet: not a Parquet file"):
        api.plan(str(folder), str(tmp_path / "x"), **POINTS)


def test_a_csv_header_with_spaces_after_its_commas(tmp_path: pathlib.Path) -> None:
    """`x, y, z` as a spreadsheet exports it (was: "no column 'y' (... columns here: x,  y,
    z)"); spaces before a comma too, on an id column with gaps read exactly."""
    (tmp_path / "t.csv").write_text(f"id, x, y, z , pre \n7, 1.5, 2, 3, {BIG}\n9, 4, 5, 6, \n")
    dest = tmp_path / "out"
    plan = api.plan(str(tmp_path / "t.csv"), str(dest), relationships=["pre=pre"], **POINTS)
    assert list(plan.describe()["columns"]) == ["id", "x", "y", "z", "pre"]
    api.convert(plan, **RUN)
    reader = AnnotationReader(f"file://{dest}/")
    assert reader.by_id[7].to_json()["point"] == [1.5, 2.0, 3.0]
    assert _segments(reader, 7) == [[BIG]] and _segments(reader, 9) == [[]]


def test_refusals_say_what_fixes_them_in_one_line(tmp_path: pathlib.Path) -> None:
    """`--property` on a text column names `--enum` (the fix); an empty CSV and a file named
    .parquet that is none are one line of ours, not a library's two-line wrapper; so is a
    `--format` annotations are not stored in."""
    frame = _points(4)
    frame["nt"] = ["gaba", "ach", "gaba", "glu"]
    frame.to_csv(tmp_path / "t.csv", index=False)
    line = _one_line_refusal(_cli("convert", "t.csv", "out", *FLAGS, "--property", "nt",
                                  cwd=tmp_path))  # fmt: skip
    assert line.endswith("t.csv: property column 'nt' holds text; a property holds numbers: "
                         "--enum nt makes its texts the names of numbers")  # fmt: skip
    (tmp_path / "empty.csv").write_text("")
    line = _one_line_refusal(_cli("convert", "empty.csv", "out", *FLAGS, cwd=tmp_path))
    assert line.endswith("empty.csv: the file is empty: a table's first line names its columns "
                         "(x,y,z,...)")  # fmt: skip
    (tmp_path / "t.parquet").write_text(frame.to_csv(index=False))
    line = _one_line_refusal(_cli("convert", "t.parquet", "out", *FLAGS, cwd=tmp_path))
    assert line.endswith("t.parquet: not a Parquet file (a CSV is named .csv)")
    frame.drop(columns="nt").to_csv(tmp_path / "t.csv", index=False)
    line = _one_line_refusal(_cli("convert", "t.csv", "out", *FLAGS, "--format", "zarr3",
                                  cwd=tmp_path))  # fmt: skip
    assert line.endswith("annotations are precomputed only (drop --format zarr3)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (dict(relationship=["pre=pre"]), "relationship= is the command line's --relationship; "
         "in Python it is relationships=['pre=pre'] (a list, one NAME=COLUMN each)"),
        (dict(relationships={"pre": "pre"}), "relationships={'pre': 'pre'} takes a list, one "
         "NAME=COLUMN each: relationships=['pre=pre']"),
        (dict(relationships="pre=pre"), "takes a list, one NAME=COLUMN each: "
         "relationships=['pre=pre']"),
        (dict(relationships=[("pre",)]), "relationships=(('pre',),): each is a text NAME=COLUMN "
         "(or a pair of texts), not ('pre',)"),
        (dict(property=["score"]), "in Python it is properties=['score']"),
        (dict(enums={"nt": ""}), "enums={'nt': ''} takes a list, one COLUMN[=VALUE:NAME,...] each"),
    ],
)  # fmt: skip
def test_python_keywords_given_in_the_wrong_form_name_the_right_one(
    given: dict[str, Any], said: str
) -> None:
    """Was: a bare TypeError (`relationship=`), or 'takes a list of values' with no hint of
    NAME=COLUMN (a dict)."""
    frame = _points(3).assign(pre=np.uint64(1), score=0.5)
    with pytest.raises(OptionError) as refused:
        api.plan(frame, "memory://out", **POINTS, **given)
    assert said in str(refused.value)


def test_the_plan_lists_every_column_and_what_becomes_of_it(tmp_path: pathlib.Path) -> None:
    frame = _points(5).assign(pre=np.uint64(3), score=0.5, nt="gaba",
                              seen=pd.Timestamp("2024-01-01"))  # fmt: skip
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    done = _cli("plan", "t.parquet", "out", *FLAGS[:4], "--relationship", "pre=pre", "--json",
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["columns"] == {
        "id": "annotation id", "x": "position", "y": "position", "z": "position",
        "pre": "relationship pre", "score": "property (float32)",
        "nt": "left out (text: --enum nt makes it a property shown by name)",
        "seen": "left out (datetime64[us]: not numbers)",
    }  # fmt: skip
    text = _cli("plan", "t.parquet", "out", *FLAGS[:4], "--property", "score", cwd=tmp_path)
    assert (
        "columns      id: annotation id; x: position; y: position; z: position; pre: left "
        "out (not a --property); score: property (float32); nt: left out" in text.stdout
    )


def test_a_named_index_and_a_csv_column_that_changes_type(tmp_path: pathlib.Path) -> None:
    """A Parquet file written from a frame indexed by `id` holds its ids (was: Dask made the
    column the index, and the annotations were numbered by row); a CSV column of whole
    numbers that holds a text past Dask's sample is one line naming it (was: Dask's
    'Mismatched dtypes' table)."""
    frame = _points(20)
    frame.set_index("id").to_parquet(tmp_path / "indexed.parquet")
    api.convert(str(tmp_path / "indexed.parquet"), str(tmp_path / "out"), **POINTS, **RUN)
    reader = AnnotationReader(f"file://{tmp_path / 'out'}/")
    assert sorted(int(a.id) for a in reader.get_within_spatial_bounds()) == frame["id"].tolist()
    big = _points(8000).assign(kind=np.arange(8000) % 3)
    big.to_csv(tmp_path / "big.csv", index=False)
    lines = (tmp_path / "big.csv").read_text().splitlines()
    lines[7000] = lines[7000].rpartition(",")[0] + ",many"
    (tmp_path / "big.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError) as refused:
        api.plan(str(tmp_path / "big.csv"), str(tmp_path / "x"), **POINTS)
    message = str(refused.value)
    assert "\n" not in message and "column 'kind' holds Int64 in its first rows and" in message


def test_segment_properties_keep_every_column_or_refuse_it(tmp_path: pathlib.Path) -> None:
    """Nullable, unsigned, Arrow-backed and categorical numbers are number properties (was:
    dropped), other texts string properties; a gap in a number, or a column of neither, is
    refused in one line naming it."""
    labels = np.random.default_rng(0).integers(1, 6, (8, 16, 16), dtype=np.uint64)
    np.save(tmp_path / "seg.npy", labels)
    dest = tmp_path / "seg"
    api.convert(str(tmp_path / "seg.npy"), str(dest), resolution=(8, 8, 40), **RUN)
    cells = pd.DataFrame({
        "id": pd.array([1, 2, 3, BIG], dtype="UInt64"),
        "label": ["a", None, "c", "d"],
        "synapses": pd.array([4000, 120, 0, 7], dtype="Int64"),
        "volume": pd.array([1.5, 2.5, 3.0, 4.0], dtype="double[pyarrow]"),
        "layer": pd.Categorical([2, 3, 2, 5]),
        "excitatory": pd.array([True, False, True, True], dtype="boolean"),
        "cell_type": ["pyramidal", "basket", None, "glia"],
    })  # fmt: skip
    api.add_segment_properties(str(dest), cells)
    found = read_segment_properties(dest)
    assert found[BIG] == {"label": "d", "cell_type": "glia", "synapses": 7, "volume": 4.0,
                          "layer": 5, "excitatory": 1}  # fmt: skip
    assert found[2] == {"label": "", "cell_type": "basket", "synapses": 120, "volume": 2.5,
                        "layer": 3, "excitatory": 0}  # fmt: skip
    assert found[3]["cell_type"] == ""
    gap = cells.assign(synapses=pd.array([4000, None, 0, 7], dtype="Int64"))
    with pytest.raises(SourceError, match="^the table: row 2: column 'synapses' is empty"):
        api.add_segment_properties(str(dest), gap)
    dated = cells.assign(seen=pd.Timestamp("2024-01-01"))
    with pytest.raises(SourceError, match=r"column 'seen' holds datetime64\[\w+\]; segment "):
        api.add_segment_properties(str(dest), dated)
    assert read_segment_properties(dest) == found  # the refused tables wrote nothing
