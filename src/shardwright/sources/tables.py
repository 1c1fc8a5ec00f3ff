"""Tables of annotations and of segment properties, checked before anything is written.

A table is opened by tables_open.py (CSV, Parquet file or folder, pandas or Dask DataFrame);
what its values are, whatever type holds them, is tables_values.py's to say. What a table's
schema can tell is checked from its column names and types before anything is read
(`annotation_columns`: every column is a position, the id, a relationship, a property or
left out, and the plan says which); what only its rows can tell (a position that is no number,
an id that is no uint64, a property with no value where `--property COLUMN=VALUE` does not say
what to write) by one pass over the partitions (`check_rows`), which also measures what the
plan needs: rows per partition, bounds, each integer property's range. Every problem is one
line naming the column and the row (counted from 1, as a spreadsheet counts data rows; in a
folder of files, the file and its row), and the option that fixes it where one does. A
missing segment id in a relationship is "no segment", as 0 is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.errors import NAMED, SourceError
from shardwright.formats.precomputed.annotations import (
    KINDS,
    PROPERTY_ID,
    AnnotationProperty,
    bounding_boxes,
)
from shardwright.formats.precomputed.segment_properties import segment_properties_info
from shardwright.sources.table_properties import (
    check_property,
    enum_property,
    property_fills,
    why_left_out,
)
from shardwright.sources.table_spool import TableSpool
from shardwright.sources.tables_open import Table, computed, open_table
from shardwright.sources.tables_values import (
    as_float,
    first,
    is_textual,
    missing,
    narrowed,
    narrowest,
    number_type,
    property_floats,
    property_type,
    segment_ids,
)

MAX_ENUM_NAMES = 65_536  # the names a text column's enum property may hold (uint16)
SEGMENT_TEXTS = ("label", "description", "tags")  # a segment properties table's named texts


@dataclass(frozen=True)
class AnnotationColumns:
    """Which columns of a table make its annotations: geometry (in the order the format
    stores it), the id column (None: row number + 1), each relationship's column, and the
    property columns with their properties (integer types decided from the rows' range);
    the columns left out, each with why (`fates` says what becomes of every column)."""

    kind: str
    geometry: tuple[str, ...]
    id: str | None
    relationships: tuple[tuple[str, str], ...]  # (relationship name, column)
    properties: tuple[tuple[str, AnnotationProperty], ...]  # (column, property)
    texts: tuple[str, ...] = ()  # property columns of text, stored as their names' numbers
    fills: tuple[tuple[str, str], ...] = ()  # (column, what is written where it is empty)
    left_out: tuple[tuple[str, str], ...] = ()  # (column, why)
    order: tuple[str, ...] = ()  # every column, as the table has them

    def fates(self) -> list[tuple[str, str]]:
        """Every column of the table and what becomes of it, in the table's order."""
        said = {name: "position" for name in self.geometry}
        if self.id is not None:
            said[self.id] = "annotation id"
        for name, column in self.relationships:
            said[column] = f"relationship {name}" if column not in said else (
                f"{said[column]}, relationship {name}")  # fmt: skip
        fills = dict(self.fills)
        for column, prop in self.properties:
            named = " named" if prop.enum_labels is not None else ""
            filled = f", {fills[column]} where empty" if column in fills else ""
            said[column] = f"property ({prop.type}{named}{filled})"
        said.update({column: f"left out ({why})" for column, why in self.left_out})
        return [(column, said[column]) for column in self.order if column in said]


def annotation_columns(
    columns: Mapping[str, Any],
    kind: str,
    where: str,
    relationships: Mapping[str, str] | None = None,
    properties: Sequence[str] | None = None,
    enums: Mapping[str, str] | None = None,
) -> AnnotationColumns:
    """The columns `kind` needs, checked by name and type (`columns`: name -> dtype).
    Properties: those named (`COLUMN`, or `COLUMN=VALUE`: VALUE, a number or nan, written
    where the column is empty), else every other column of numbers and every column of `enums`
    (column -> "VALUE:NAME,..." for whole numbers, or "" for a column of text, whose
    texts become the names once the rows are read)."""
    if kind not in KINDS:
        raise SourceError(f"unknown annotation type {kind!r} ({', '.join(KINDS)})")
    geometry = KINDS[kind][1]
    related = dict(relationships or {})
    named = dict(enums or {})
    fills = property_fills(properties or [], where)
    properties = None if properties is None else [p.partition("=")[0] for p in properties]
    here = ", ".join(map(str, columns))
    for name in geometry:
        if name not in columns:
            raise SourceError(f"{where}: no column {name!r} (an annotation of type {kind} needs "
                              f"{', '.join(geometry)}; columns here: {here})")  # fmt: skip
    for option, names in (("relationships", related.values()), ("properties", properties or []),
                          ("enums", named)):  # fmt: skip
        for name in names:
            if name not in columns:
                raise SourceError(f"{where}: no column {name!r}, which {{{option}}} names "
                                  f"(columns here: {here})", **{option: NAMED})  # fmt: skip
    for name in [*geometry, *related.values()]:  # text columns: their rows say which value
        if number_type(columns[name]) is None and not is_textual(columns[name]):
            raise SourceError(f"{where}: column {name!r} holds {columns[name]}, not numbers")
    taken = {*geometry, *related.values(), "id"}
    if properties is None:
        numbers = [c for c in columns if number_type(columns[c]) is not None]
        chosen = [c for c in columns if c not in taken and (c in numbers or c in named)]
    else:
        chosen = list(properties)
        for name in named:
            if name not in chosen:
                raise SourceError(f"{where}: column {name!r} has --enum but is no --property")
        for name in chosen:
            if name in taken:
                raise SourceError(f"{where}: column {name!r} cannot also be a property")
            check_property(name, columns[name], name in named, where)
    for name in fills:
        if name not in chosen or number_type(columns[name]) is None:
            raise SourceError(f"{where}: {{properties}} {name}=...: only a property column of "
                              "numbers has a value written where it is empty",
                              properties=NAMED)  # fmt: skip
    for name in chosen:
        if not PROPERTY_ID.fullmatch(str(name)):
            raise SourceError(
                f"{where}: column {name!r} cannot name a Neuroglancer property (a lowercase "
                "letter first, then letters, digits and _): rename it, or leave it out by "
                "naming the others with {properties}", properties=NAMED,
            )  # fmt: skip
    props = tuple((str(c), enum_property(str(c), columns[c], named.get(c), where))
                  for c in chosen)  # fmt: skip
    return AnnotationColumns(
        kind=kind,
        geometry=geometry,
        id="id" if "id" in columns else None,
        relationships=tuple(related.items()),
        properties=props,
        texts=tuple(c for c, spec in named.items() if spec == ""),
        fills=tuple(fills.items()),
        left_out=tuple(
            (str(c), why_left_out(str(c), columns[c], properties is not None))
            for c in columns
            if c not in taken and c not in chosen
        ),  # fmt: skip
        order=tuple(str(c) for c in columns),
    )


@dataclass(frozen=True)
class PartitionFacts:
    """What one pass over a partition found: its rows, the first bad row (message, local
    row), its geometry's bounds and each integer property column's range."""

    rows: int
    problem: tuple[str, int] | None
    low: tuple[float, ...]
    high: tuple[float, ...]
    ranges: dict[str, tuple[float, float]]
    texts: dict[str, frozenset[str]]


EMPTY_PROPERTY = (
    "column {0!r} is empty: each row of a property needs a value (fill it in, "
    "give {{properties}} {0}=VALUE to write VALUE, a number or nan, where it is "
    "empty, or leave the column out by naming the others with {{properties}})"
)


Problems = list[tuple[int, str]]  # (row, what is wrong there)


def _geometry(frame: Any, columns: AnnotationColumns, problems: Problems) -> np.ndarray:
    """The partition's geometry columns as floats [rows, n]; a value that is no finite number
    (or an ellipsoid's negative radius) is a problem naming its row."""
    geometry = np.empty((len(frame), len(columns.geometry)), np.float64)
    for index, name in enumerate(columns.geometry):
        values = as_float(frame[name])
        row = first(~np.isfinite(values))
        if row is not None:
            given = frame[name].iloc[row]
            given = given.item() if isinstance(given, np.generic) else given
            said = (
                "is empty" if missing(frame[name])[row] else f"holds {given!r}, not a finite number"
            )
            problems.append((row, f"column {name!r} {said}"))
        geometry[:, index] = values
    if columns.kind == "ellipsoid":
        negative = (geometry[:, 3:] < 0).any(axis=1)
        if negative.any():
            problems.append((int(np.argmax(negative)), "an ellipsoid radius is negative"))
    return geometry


def _property_ranges(
    frame: Any, columns: AnnotationColumns, problems: Problems
) -> dict[str, tuple[float, float]]:
    """Each numeric property's (min, max) in the partition; an empty value without a fill,
    a fill or value no integer property can hold, or an enum value --enum does not name is a
    problem naming its row."""
    ranges: dict[str, tuple[float, float]] = {}
    rows = len(frame)
    fills = dict(columns.fills)
    for column, prop in columns.properties:
        if column in columns.texts:
            continue
        values = property_floats(frame[column], fills.get(column))
        row = first(missing(frame[column]))
        if row is not None and column not in fills:
            problems.append((row, EMPTY_PROPERTY.format(column)))
            continue
        if prop.type == "float32":
            continue
        if row is not None and not float(fills[column]).is_integer():
            problems.append((row, f"column {column!r} is empty and {fills[column]}, written "
                             "there, is no whole number, as an integer property needs (give "
                             f"{{properties}} {column}=0, say)"))  # fmt: skip
            continue
        if prop.enum_values is not None:
            unnamed = ~np.isin(values, np.asarray(prop.enum_values, np.float64))
            if unnamed.any():
                row = int(np.argmax(unnamed))
                problems.append((row, f"column {column!r} holds {values[row]:.0f}, which --enum "
                                 "does not name"))  # fmt: skip
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            problems.append((int(np.argmax(bad)), f"property {column!r} is not an integer"))
        elif rows:
            ranges[column] = (float(values.min()), float(values.max()))
    return ranges


def check_rows(
    frame: Any, columns: AnnotationColumns, spool: TableSpool | None = None, number: int = 0
) -> PartitionFacts:
    """One partition (a pandas DataFrame) checked row by row, vectorized; a partition without
    a problem leaves its ids and bounding boxes in `spool` (as partition `number`)."""
    rows = len(frame)
    problems: Problems = []
    geometry = _geometry(frame, columns, problems)
    ids = None
    if columns.id is not None:
        read = segment_ids(frame[columns.id])
        problems.extend(_id_problems(read, columns.id))
        row = first(read.missing)
        if row is not None:
            problems.append((row, f"column {columns.id!r} is empty: each annotation needs its "
                             "id (a table without an 'id' column numbers its rows)"))  # fmt: skip
        ids = read.values
    for _, column in columns.relationships:  # a missing segment is none, as 0 is
        problems.extend(_id_problems(segment_ids(frame[column]), column))
    texts = {}
    for column in columns.texts:
        names = frame[column]
        row = first(missing(names))
        if row is not None:
            problems.append((row, EMPTY_PROPERTY.format(column)))
        texts[column] = frozenset(names.astype(str).unique()[: MAX_ENUM_NAMES + 1].tolist())
    ranges = _property_ranges(frame, columns, problems)
    boxes = bounding_boxes(columns.kind, geometry)
    low, high = _bounds(*boxes)
    if spool is not None and not problems:
        spool.keep(number, ids, *boxes)
    worst = min(problems) if problems else None
    return PartitionFacts(
        rows=rows,
        problem=(worst[1], worst[0]) if worst else None,
        low=low,
        high=high,
        ranges=ranges,
        texts=texts,
    )


def _id_problems(read: Any, column: str) -> list[tuple[int, str]]:
    """An id column's first value that is no uint64 id, as (row, message)."""
    if read.problem is None:
        return []
    row, what = read.problem
    return [(row, f"column {column!r} {what}")]


def _bounds(low: np.ndarray, high: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The partition's lowest and highest coordinate along x, y, z of any annotation's
    bounding box (`low`, `high`: each annotation's); +inf/-inf when it is empty."""
    if not low.shape[0] or not (np.isfinite(low).all() and np.isfinite(high).all()):
        return (math.inf,) * 3, (-math.inf,) * 3
    return tuple(low.min(axis=0).tolist()), tuple(high.max(axis=0).tolist())


@dataclass(frozen=True)
class TableFacts:
    """A checked table: its columns (integer properties narrowed), rows per partition, and
    the bounds of its geometry."""

    columns: AnnotationColumns
    partition_rows: tuple[int, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    @property
    def rows(self) -> int:
        return sum(self.partition_rows)


def inspect_table(
    table: Table,
    kind: str,
    where: str,
    spool: TableSpool,
    relationships: Mapping[str, str] | None = None,
    properties: Sequence[str] | None = None,
    enums: Mapping[str, str] | None = None,
) -> TableFacts:
    """The table checked by its schema, then by one pass over its rows (on the Dask
    scheduler the caller chose), which leaves each row's id and bounding box in `spool`,
    then for repeated ids; the first problem is one SourceError. The table's `pieces` are
    its partitions as every later pass reads them (taken once: Dask may group a Parquet
    dataset's files differently for another projection of its columns)."""
    import dask

    columns = annotation_columns(dict(table.frame.dtypes.items()), kind, where, relationships,
                                 properties, enums)  # fmt: skip
    parts = computed(where, *[dask.delayed(check_rows)(p, columns, spool, n)
                              for n, p in enumerate(table.pieces)])  # fmt: skip
    counts = [facts.rows for facts in parts]
    offset = 0
    for facts in parts:
        if facts.problem is not None:
            message, row = facts.problem
            raise SourceError(f"{where}: {table.row_name(offset + row, counts)}: {message}",
                              properties=NAMED)  # fmt: skip
        offset += facts.rows
    if not offset:
        raise SourceError(f"{where}: the table has no rows")
    repeated = spool.first_repeated_id(counts)
    if repeated is not None:
        raise SourceError(
            f"{where}: {table.rows_name(repeated.rows, counts)} share the id {repeated.id} (column "
            f"{columns.id!r}); each annotation needs its own"
        )
    props = []
    for column, prop in columns.properties:
        if column in columns.texts:
            props.append((column, _named_texts(prop, [f.texts[column] for f in parts], where)))
            continue
        spans = [facts.ranges[column] for facts in parts if column in facts.ranges]
        if prop.type == "float32" or not spans:
            props.append((column, prop))
            continue
        low, high = min(s[0] for s in spans), max(s[1] for s in spans)
        props.append((column, narrowed(prop, low, high, where)))
    return TableFacts(
        columns=dataclasses.replace(columns, properties=tuple(props)),
        partition_rows=tuple(counts),
        low=tuple(min(f.low[d] for f in parts) for d in range(3)),
        high=tuple(max(f.high[d] for f in parts) for d in range(3)),
    )


def _named_texts(
    prop: AnnotationProperty, seen: Sequence[frozenset[str]], where: str
) -> AnnotationProperty:
    """A column of text as a property of named numbers: its texts in sorted order are the
    names of 0, 1, 2, ... (uint8 up to 256 names, else uint16)."""
    names = sorted(frozenset().union(*seen))
    if len(names) > MAX_ENUM_NAMES:
        raise SourceError(f"{where}: column {prop.id!r} holds over {MAX_ENUM_NAMES:,} different "
                          "texts; an enum property names at most that many")  # fmt: skip
    kind = "uint8" if len(names) <= 256 else "uint16"
    return dataclasses.replace(prop, type=kind, enum_values=tuple(range(len(names))),
                               enum_labels=tuple(names))  # fmt: skip


def segment_properties_of(source: Any, storage_options: Mapping[str, Any] | None,
                          where: str) -> dict[str, Any]:  # fmt: skip
    """A segment properties table (`id`, then any of `label`, `description`, `tags`
    (comma-separated), numbers and other texts) as its `neuroglancer_segment_properties`
    info; read whole (Neuroglancer reads the inline form, one document). Every column is
    kept or refused: a column of numbers (any type) is a number property, one of text a
    string property."""
    import pandas as pd

    table = open_table(source, storage_options, ids=("id",))
    pieces = computed(where, *table.pieces)
    counts = [len(piece) for piece in pieces]
    frame = pd.concat(pieces, ignore_index=True) if pieces else table.frame.compute()

    def refused(row: int, message: str) -> SourceError:
        return SourceError(f"{where}: {table.row_name(row, counts)}: {message}")

    if "id" not in frame.columns:
        raise SourceError(f"{where}: no column 'id' (segment properties need each row's id)")
    read = segment_ids(frame["id"])
    if read.problem is not None:
        raise refused(read.problem[0], f"column 'id' {read.problem[1]}")
    if (row := first(read.missing)) is not None:
        raise refused(row, "column 'id' is empty: each segment's row needs its id")
    ids = read.values
    order = np.argsort(ids, kind="stable")
    repeated = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if repeated.size:
        one, two = sorted(order[repeated[0] : repeated[0] + 2].tolist())
        raise SourceError(f"{where}: {table.rows_name((one, two), counts)} share the id {ids[one]}")

    def text(name: str) -> list[str]:
        return ["" if pd.isna(value) else str(value) for value in frame[name]]

    numbers, strings = {}, {}
    for name in frame.columns:
        if name in ("id", *SEGMENT_TEXTS):
            continue
        number = number_type(frame[name].dtype)
        if number is None:
            if not is_textual(frame[name].dtype):
                raise SourceError(f"{where}: column {name!r} holds {frame[name].dtype}; segment "
                                  "properties are numbers or text: convert it, or drop it "
                                  "from the table")  # fmt: skip
            strings[str(name)] = text(name)
            continue
        values = as_float(frame[name])
        if (row := first(~np.isfinite(values))) is not None:
            raise refused(row, f"column {name!r} is empty: a number property needs a value "
                          "for every segment (fill it in, or drop the column)"
                          if missing(frame[name])[row] else
                          f"column {name!r} is not a finite number")  # fmt: skip
        kind = property_type(number)
        if kind != "float32" and len(values):
            kind = narrowest(str(name), float(values.min()), float(values.max()), where)
        numbers[str(name)] = values.astype(kind)
    tags = text("tags") if "tags" in frame else None
    return segment_properties_info(
        ids, text("label") if "label" in frame else None,
        text("description") if "description" in frame else None,
        None if tags is None else [[t.strip() for t in row.split(",") if t.strip()]
                                   for row in tags],
        numbers, strings,
    )  # fmt: skip
