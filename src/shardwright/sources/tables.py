"""Tables of annotations: CSV or Parquet (local, gs://, s3://) or a pandas or Dask DataFrame,
read as a Dask DataFrame whose partitions are what one task reads.

What a table's schema can tell is checked from its column names and types before anything
is read (`annotation_columns`); what only its rows can tell (a NaN position, an id that is
no uint64, a segment id out of range) by one pass over the partitions (`check_rows`), which
also measures what the plan needs: rows per partition, bounds, each integer property's range.
Every problem is one line naming the column and the row (counted from 1, as a spreadsheet
counts data rows).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright.common.flags import enum_labels
from shardwright.errors import SourceError
from shardwright.formats.precomputed.annotations import (
    KINDS,
    PROPERTY_ID,
    AnnotationProperty,
    bounding_boxes,
)
from shardwright.formats.precomputed.segment_properties import segment_properties_info
from shardwright.sources.table_spool import TableSpool
from shardwright.version import install_command

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
ROWS_PER_PARTITION = 1_000_000  # a pandas DataFrame given is cut into partitions this long
# A CSV is read in blocks of this many bytes; a Parquet file's row groups are gathered into
# partitions of about this many bytes uncompressed (a row group is never split: one larger
# than this is a partition of its own).
PARTITION_BYTES = 64 * 2**20
MAX_ID = 2**64 - 1
MAX_ENUM_NAMES = 65_536  # the names a text column's enum property may hold (uint16)
# Neuroglancer's integer property types, narrowest first, and their ranges.
INTEGER_TYPES = [(name, np.iinfo(name)) for name in
                 ("uint8", "int8", "uint16", "int16", "uint32", "int32")]  # fmt: skip


def is_table(source: Any) -> bool:
    """A CSV or Parquet file by its name, or a pandas or Dask DataFrame."""
    if isinstance(source, str):
        return source.partition("?")[0].lower().rstrip("/").endswith(TABLE_SUFFIXES)
    kind = type(source)
    return kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] in ("pandas", "dask")


def open_table(source: Any, storage_options: Mapping[str, Any] | None = None) -> Any:
    """The table as a Dask DataFrame (nothing read but what names its columns)."""
    try:
        import dask.dataframe as dd
        import pandas as pd
    except ImportError:
        raise SourceError(
            "reading tables needs pandas and pyarrow: " + install_command("tables")
        ) from None
    if isinstance(source, pd.DataFrame):
        return dd.from_pandas(source, chunksize=ROWS_PER_PARTITION, sort=False)
    if not isinstance(source, str):
        return source  # a Dask DataFrame
    options = dict(storage_options or {})
    try:
        if source.lower().endswith(".csv"):
            return dd.read_csv(source, storage_options=options, blocksize=PARTITION_BYTES)
        return dd.read_parquet(source, storage_options=options, split_row_groups="adaptive",
                               blocksize=PARTITION_BYTES)  # fmt: skip
    except FileNotFoundError:
        raise SourceError(f"{source}: source does not exist") from None
    except (OSError, ValueError) as exc:
        raise SourceError(f"{source}: cannot read the table ({exc})") from exc


@dataclass(frozen=True)
class AnnotationColumns:
    """Which columns of a table make its annotations: geometry (in the order the format
    stores it), the id column (None: row number + 1), each relationship's column, and the
    property columns with their properties (integer types decided from the rows' range)."""

    kind: str
    geometry: tuple[str, ...]
    id: str | None
    relationships: tuple[tuple[str, str], ...]  # (relationship name, column)
    properties: tuple[tuple[str, AnnotationProperty], ...]  # (column, property)
    texts: tuple[str, ...] = ()  # property columns of text, stored as their names' numbers


def annotation_columns(
    columns: Mapping[str, Any],
    kind: str,
    where: str,
    relationships: Mapping[str, str] | None = None,
    properties: Sequence[str] | None = None,
    enums: Mapping[str, str] | None = None,
) -> AnnotationColumns:
    """The columns `kind` needs, checked by name and type (`columns`: name -> dtype).
    Properties: those named, else every other numeric column and every column of `enums`
    (column -> "VALUE:NAME,..." for whole numbers, or "" for a column of text, whose
    texts become the names once the rows are read)."""
    if kind not in KINDS:
        raise SourceError(f"unknown annotation type {kind!r} ({', '.join(KINDS)})")
    geometry = KINDS[kind][1]
    related = dict(relationships or {})
    named = dict(enums or {})
    needed = [*geometry, *related.values(), *(properties or []), *named]
    for name in needed:
        if name not in columns:
            raise SourceError(
                f"{where}: no column {name!r} (an annotation of type {kind} needs "
                f"{', '.join(geometry)}; columns here: {', '.join(map(str, columns))})"
            )
    for name in [*geometry, *related.values()]:  # text columns: their rows say which value
        if not _numeric(columns[name]) and not is_textual(columns[name]):
            raise SourceError(f"{where}: column {name!r} holds {columns[name]}, not numbers")
    taken = {*geometry, *related.values(), "id"}
    if properties is None:
        chosen = [c for c in columns if c not in taken and (_numeric(columns[c]) or c in named)]
    else:
        chosen = list(properties)
        for name in named:
            if name not in chosen:
                raise SourceError(f"{where}: column {name!r} has --enum but is no --property")
        for name in chosen:
            if name in taken:
                raise SourceError(f"{where}: column {name!r} cannot also be a property")
            if not _numeric(columns[name]) and named.get(name) != "":
                raise SourceError(
                    f"{where}: property column {name!r} holds {columns[name]}; properties "
                    "are numbers (uint8 ... int32, float32)"
                )
    for name in chosen:
        if not PROPERTY_ID.fullmatch(str(name)):
            raise SourceError(
                f"{where}: column {name!r} cannot name a Neuroglancer property (a lowercase "
                "letter first, then letters, digits and _): rename it, or leave it out with "
                "--property"
            )
    props = tuple((str(c), _enum_property(str(c), columns[c], named.get(c), where))
                  for c in chosen)  # fmt: skip
    return AnnotationColumns(
        kind=kind,
        geometry=geometry,
        id="id" if "id" in columns else None,
        relationships=tuple(related.items()),
        properties=props,
        texts=tuple(c for c, spec in named.items() if spec == ""),
    )


def _enum_property(column: str, dtype: Any, spec: str | None, where: str) -> AnnotationProperty:
    """A column's property: named values where `spec` gives them (whole numbers only), a
    column of text to be named from its rows ("": its type decided then), else a number."""
    if spec is None:
        return AnnotationProperty(column, _property_type(dtype))
    if spec == "":
        if _numeric(dtype):
            raise SourceError(f"{where}: column {column!r} holds numbers: name them with "
                              f"--enum {column}=VALUE:NAME,...")  # fmt: skip
        return AnnotationProperty(column, "uint16")
    if not _numeric(dtype) or np.dtype(dtype).kind == "f":
        raise SourceError(f"{where}: column {column!r} holds {dtype}; --enum {column}=VALUE:NAME "
                          "names whole numbers (a column of text takes --enum COLUMN)")  # fmt: skip
    values, labels = enum_labels(spec)
    return AnnotationProperty(column, _property_type(dtype), None, values, labels)


def _numeric(dtype: Any) -> bool:
    return _is_numpy(dtype) and np.dtype(dtype).kind in "biuf"


def is_textual(dtype: Any) -> bool:
    """Text (CSV fields that are not all numbers): object or pandas' string dtypes."""
    return str(dtype) in ("object", "string", "str") or str(dtype).startswith("string")


def _is_numpy(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def _property_type(dtype: Any) -> str:
    """Neuroglancer's type for a numeric column; wider integers are narrowed once the rows
    show their range (`narrowed`), wider floats stored as float32."""
    kind = np.dtype(dtype)
    if kind.kind == "b":
        return "uint8"
    if kind.kind == "f":
        return "float32"
    if kind.itemsize <= 4:
        return kind.name
    return "int32"  # int64 / uint64: decided by `narrowed` from the rows' range


def narrowed(prop: AnnotationProperty, low: float, high: float, where: str) -> AnnotationProperty:
    """An integer property's narrowest type holding [low, high]; a range no Neuroglancer
    integer type holds is refused, naming the column."""
    if prop.type == "float32":
        return prop
    low, high = min([low, *(prop.enum_values or ())]), max([high, *(prop.enum_values or ())])
    for name, info in INTEGER_TYPES:
        if info.min <= low and high <= info.max:
            return dataclasses.replace(prop, type=name)
    raise SourceError(
        f"{where}: column {prop.id!r} holds values from {low:.0f} to {high:.0f}; Neuroglancer "
        "properties are at most 32-bit integers (or float32): scale or split the column"
    )


@dataclass(frozen=True)
class PartitionFacts:
    """What one pass over a partition found: its rows, the first bad row (message, local
    row), its geometry's bounds and each property column's range."""

    rows: int
    problem: tuple[str, int] | None
    low: tuple[float, ...]
    high: tuple[float, ...]
    ranges: dict[str, tuple[float, float]]
    texts: dict[str, frozenset[str]]


def check_rows(
    frame: Any, columns: AnnotationColumns, spool: TableSpool | None = None, number: int = 0
) -> PartitionFacts:
    """One partition (a pandas DataFrame) checked row by row, vectorized; a partition without
    a problem leaves its ids and bounding boxes in `spool` (as partition `number`)."""
    rows = len(frame)
    problems: list[tuple[int, str]] = []
    geometry = np.empty((rows, len(columns.geometry)), np.float64)
    for index, name in enumerate(columns.geometry):
        values = _as_float(frame[name])
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.argmax(bad))
            given = np.asarray(frame[name])[row]
            given = given.item() if isinstance(given, np.generic) else given
            problems.append((row, f"column {name!r} holds {given!r}, not a finite number"))
        geometry[:, index] = values
    if columns.kind == "ellipsoid":
        negative = (geometry[:, 3:] < 0).any(axis=1)
        if negative.any():
            problems.append((int(np.argmax(negative)), "an ellipsoid radius is negative"))
    if columns.id is not None:
        problems.extend(_id_problems(frame[columns.id], repr(columns.id), allow_zero=True))
    for _, column in columns.relationships:
        problems.extend(_id_problems(frame[column], repr(column), allow_zero=True))
    ranges, texts = {}, {}
    for column in columns.texts:
        names = frame[column]
        if names.isna().any():
            problems.append(
                (int(np.argmax(names.isna().to_numpy())), f"column {column!r} is empty")
            )
        texts[column] = frozenset(names.astype(str).unique()[: MAX_ENUM_NAMES + 1].tolist())
    for column, prop in columns.properties:
        if column in columns.texts:
            continue
        values = _as_float(frame[column])
        if prop.enum_values is not None:
            unnamed = ~np.isin(values, np.asarray(prop.enum_values, np.float64))
            if unnamed.any():
                row = int(np.argmax(unnamed))
                problems.append((row, f"column {column!r} holds {values[row]:.0f}, which --enum "
                                 "does not name"))  # fmt: skip
        if prop.type != "float32":
            bad = ~np.isfinite(values) | (values != np.round(values))
            if bad.any():
                problems.append((int(np.argmax(bad)), f"property {column!r} is not an integer"))
        if rows:
            ranges[column] = (float(np.nanmin(values)), float(np.nanmax(values)))
    boxes = bounding_boxes(columns.kind, geometry)
    low, high = _bounds(*boxes)
    if spool is not None and not problems:
        ids = None if columns.id is None else np.asarray(frame[columns.id]).astype(np.uint64)
        spool.keep(number, ids, *boxes)
    first = min(problems) if problems else None
    return PartitionFacts(
        rows=rows,
        problem=(first[1], first[0]) if first else None,
        low=low,
        high=high,
        ranges=ranges,
        texts=texts,
    )


def _as_float(series: Any) -> np.ndarray:
    import pandas as pd

    return np.asarray(pd.to_numeric(series, errors="coerce"), dtype=np.float64)


def _id_problems(series: Any, name: str, allow_zero: bool) -> list[tuple[int, str]]:
    """An id column's first value that is no uint64 (negative, fractional, too large)."""
    values = np.asarray(series)
    if values.dtype.kind == "u":
        return []
    if values.dtype.kind == "i":
        bad = values < (0 if allow_zero else 1)
        return [(int(np.argmax(bad)), f"{name} holds a negative id")] if bad.any() else []
    if values.dtype.kind == "O":  # numbers too large for int64/uint64, or text: one by one
        for row, value in enumerate(values.tolist()):
            if not _is_uint64(value):
                return [(row, f"{name} holds {value!r}, not a uint64 id")]
        return []
    as_float = _as_float(series)
    bad = ~np.isfinite(as_float) | (as_float < 0) | (as_float != np.floor(as_float))
    bad |= as_float >= 2.0**64
    if bad.any():
        value = values[np.argmax(bad)]
        value = value.item() if isinstance(value, np.generic) else value
        return [(int(np.argmax(bad)), f"{name} holds {value!r}, not a uint64 id")]
    return []


def _is_uint64(value: Any) -> bool:
    """A value of an object column (text, or a number beyond 64 bits) that is a uint64."""
    if isinstance(value, str):
        text = value.strip()
        return text.isdigit() and int(text) <= MAX_ID
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return bool(number == value) and 0 <= number <= MAX_ID


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
    frame: Any,
    pieces: Sequence[Any],
    kind: str,
    where: str,
    spool: TableSpool,
    relationships: Mapping[str, str] | None = None,
    properties: Sequence[str] | None = None,
    enums: Mapping[str, str] | None = None,
) -> TableFacts:
    """The table checked by its schema, then by one pass over its rows (on the Dask
    scheduler the caller chose), which leaves each row's id and bounding box in `spool`,
    then for repeated ids; the first problem is one SourceError. `pieces`: the table's
    partitions as every later pass reads them (`frame.to_delayed()`, taken once: Dask may
    group a Parquet dataset's files differently for another projection of its columns)."""
    import dask

    columns = annotation_columns(dict(frame.dtypes.items()), kind, where, relationships,
                                 properties, enums)  # fmt: skip
    parts = dask.compute(*[dask.delayed(check_rows)(p, columns, spool, n)
                           for n, p in enumerate(pieces)])  # fmt: skip
    offset = 0
    for facts in parts:
        if facts.problem is not None:
            message, row = facts.problem
            raise SourceError(f"{where}: row {offset + row + 1}: {message}")
        offset += facts.rows
    if not offset:
        raise SourceError(f"{where}: the table has no rows")
    repeated = spool.first_repeated_id([facts.rows for facts in parts])
    if repeated is not None:
        first, second = repeated.rows
        raise SourceError(
            f"{where}: rows {first + 1} and {second + 1} share the id {repeated.id} (column "
            f"{columns.id!r}); each annotation needs its own"
        )
    props = []
    for column, prop in columns.properties:
        if column in columns.texts:
            props.append((column, _named_texts(prop, [f.texts[column] for f in parts], where)))
            continue
        spans = [facts.ranges[column] for facts in parts if column in facts.ranges]
        low, high = min(s[0] for s in spans), max(s[1] for s in spans)
        props.append((column, narrowed(prop, low, high, where)))
    return TableFacts(
        columns=dataclasses.replace(columns, properties=tuple(props)),
        partition_rows=tuple(facts.rows for facts in parts),
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


def text_codes(prop: AnnotationProperty, texts: Any) -> np.ndarray:
    """A text column's values as the numbers its names stand for (every text is a name:
    the plan read them all)."""
    names = np.asarray(prop.enum_labels)
    return np.searchsorted(names, np.asarray(texts, dtype=str)).astype(prop.type)


def segment_properties_of(source: Any, storage_options: Mapping[str, Any] | None,
                          where: str) -> dict[str, Any]:  # fmt: skip
    """A segment properties table (`id`, then any of `label`, `description`, `tags`
    (comma-separated), and numeric columns) as its `neuroglancer_segment_properties` info;
    read whole (Neuroglancer reads the inline form, one document)."""
    frame = open_table(source, storage_options).compute()
    if "id" not in frame.columns:
        raise SourceError(f"{where}: no column 'id' (segment properties need each row's id)")
    problems = _id_problems(frame["id"], "'id'", allow_zero=True)
    if problems:
        row, message = problems[0]
        raise SourceError(f"{where}: row {row + 1}: {message}")
    ids = np.asarray(frame["id"]).astype(np.uint64)
    order = np.argsort(ids, kind="stable")
    repeated = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if repeated.size:
        first, second = sorted(order[repeated[0] : repeated[0] + 2].tolist())
        raise SourceError(f"{where}: rows {first + 1} and {second + 1} share the id {ids[first]}")

    def text(name: str) -> list[str] | None:
        import pandas as pd

        return None if name not in frame else [
            "" if pd.isna(value) else str(value) for value in frame[name]
        ]  # fmt: skip

    tags = text("tags")
    numbers = {}
    for name in frame.columns:
        if name in ("id", "label", "description", "tags") or not _numeric(frame[name].dtype):
            continue
        values = _as_float(frame[name])
        if not np.isfinite(values).all():
            row = int(np.argmax(~np.isfinite(values)))
            raise SourceError(f"{where}: row {row + 1}: column {name!r} is not a finite number")
        prop = narrowed(AnnotationProperty("n", _property_type(frame[name].dtype)),
                        float(values.min()), float(values.max()), where)  # fmt: skip
        numbers[str(name)] = values.astype(prop.type)
    return segment_properties_info(
        ids, text("label"), text("description"),
        None if tags is None else [[t.strip() for t in row.split(",") if t.strip()]
                                   for row in tags],
        numbers,
    )  # fmt: skip
