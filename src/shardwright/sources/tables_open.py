"""Opening a table: a CSV, a Parquet file or folder (local, gs://, s3://), or a pandas or Dask
DataFrame, as a Dask DataFrame whose partitions are what one task reads.

A CSV is read in 64 MiB blocks with pandas' nullable types (a missing value in a later block
keeps an integer column's type, where numpy's would turn it into floats there and nowhere
else), its id columns as text (read exactly: tables_values.py), its header names stripped of
the spaces around them. A Parquet file, or a folder of them (as Dask, Spark or pyarrow write
one, with or without a suffix, Hive-partitioned or not), is read here rather than by Dask's
reader, so that the files may differ in their columns: their schemas are unified (a column a
file lacks is missing in its rows; one held as types that cannot be joined is refused naming
two files), each file's row groups are gathered into partitions of about 64 MiB (a row group
is never split, files are never joined), and each partition knows its file and its first row
there, so that a problem names the file and the row in it. What no reader can open is one line
naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shardwright.errors import SourceError
from shardwright.version import install_command

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
ROWS_PER_PARTITION = 1_000_000  # a pandas DataFrame given is cut into partitions this long
# A CSV is read in blocks of this many bytes; a Parquet file's row groups are gathered into
# partitions of about this many bytes uncompressed (a row group is never split: one larger
# than this is a partition of its own).
PARTITION_BYTES = 64 * 2**20
PARQUET_MAGIC = b"PAR1"
# pandas' and Dask's unnamed index, written beside the data: no column of it
_INDEX_COLUMN = re.compile(r"__index_level_\d+__|__null_dask_index__")
_READERS = 16  # Parquet footers read at once


def is_table(source: Any) -> bool:
    """A CSV or Parquet file by its name, or a pandas or Dask DataFrame."""
    if isinstance(source, str):
        return source.partition("?")[0].lower().rstrip("/").endswith(TABLE_SUFFIXES)
    kind = type(source)
    return kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] in ("pandas", "dask")


def holds_parquet(source: Any, storage_options: Mapping[str, Any] | None = None) -> bool:
    """A path without a table's suffix that is Parquet all the same: a file that starts as
    Parquet does, or a folder of Parquet files (`df.to_parquet("synapses")` from Dask). Asked
    only where the options describe a table: it lists the folder."""
    if not isinstance(source, str) or is_table(source):
        return False
    try:
        fs, path = _filesystem(source, storage_options)
        if fs.isdir(path):
            return any(f.lower().endswith(TABLE_SUFFIXES[1:]) for f in _parquet_files(fs, path))
        with fs.open(path, "rb") as file:
            return bool(file.read(4) == PARQUET_MAGIC)
    except (OSError, ValueError, SourceError):
        return False


@dataclass(frozen=True)
class Table:
    """An opened table: its Dask DataFrame, its partitions as every pass reads them (taken
    once), and, for a folder of files, each partition's file and first row in that file."""

    frame: Any
    pieces: tuple[Any, ...]
    files: tuple[tuple[str, int], ...] = ()

    def row_name(self, row: int, partition_rows: Sequence[int]) -> str:
        """Row `row` of the table (from 0) as a user finds it: `row 5` of the file, or
        `part.3.parquet row 5` in a folder."""
        if not self.files:
            return f"row {row + 1}"
        first = 0
        for number, rows in enumerate(partition_rows):
            if row < first + rows:
                name, start = self.files[number]
                return f"{name} row {start + row - first + 1}"
            first += rows
        return f"row {row + 1}"

    def rows_name(self, rows: tuple[int, int], partition_rows: Sequence[int]) -> str:
        """Two rows (from 0) as a user finds them: `rows 2 and 7`, or each with its file."""
        if not self.files:
            return f"rows {rows[0] + 1} and {rows[1] + 1}"
        return " and ".join(self.row_name(row, partition_rows) for row in rows)


def open_table(
    source: Any, storage_options: Mapping[str, Any] | None = None, ids: Sequence[str] = ()
) -> Table:
    """The table (nothing read but what names its columns; `ids`: the columns of segment
    ids, read from a CSV as text)."""
    try:
        import dask.dataframe as dd
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError:
        raise SourceError(
            "reading tables needs pandas and pyarrow: " + install_command("tables")
        ) from None
    if isinstance(source, pd.DataFrame):
        frame = dd.from_pandas(_stripped(source, "the table"), chunksize=ROWS_PER_PARTITION,
                               sort=False)  # fmt: skip
        return Table(frame, tuple(frame.to_delayed()))
    if not isinstance(source, str):  # a Dask DataFrame
        frame = _stripped(source, "the table")
        return Table(frame, tuple(frame.to_delayed()))
    options = dict(storage_options or {})
    if source.partition("?")[0].lower().endswith(".csv"):
        frame = _read_csv(source, options, ids)
        return Table(frame, tuple(frame.to_delayed()))
    return _read_parquet(source, options)


def computed(where: str, *tasks: Any) -> tuple[Any, ...]:
    """`dask.compute(*tasks)` over a table's partitions; a CSV column whose type changes after
    the rows Dask sampled (a text or a fraction in a column of whole numbers) is one line."""
    import dask

    try:
        return tuple(dask.compute(*tasks))
    except ValueError as exc:
        if not str(exc).startswith("Mismatched dtypes"):
            raise
        found = re.findall(r"^\|\s*(.+?)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|$", str(exc), re.M)
        said = "; ".join(f"column {name!r} holds {was} in its first rows and {now} further on"
                         for name, now, was in found if name != "Column")  # fmt: skip
        raise SourceError(
            f"{where}: {said or 'a column changes its type further on'}: give "
            "each column one type throughout (1.0 rather than 1 where a column "
            "holds fractions), or write the table as Parquet"
        ) from None


def _stripped(frame: Any, where: str) -> Any:
    """The frame with its column names stripped of spaces around them (`x, y, z` as a
    spreadsheet exports a header); two names that become one are refused."""
    names = [str(c).strip() if isinstance(c, str) else c for c in frame.columns]
    seen: dict[Any, Any] = {}
    for raw, name in zip(frame.columns, names, strict=True):
        if name in seen:
            raise SourceError(f"{where}: columns {seen[name]!r} and {raw!r} are both {name!r} "
                              "once the spaces around them are dropped: rename one")  # fmt: skip
        seen[name] = raw
    if names == list(frame.columns):
        return frame
    return frame.rename(columns=dict(zip(frame.columns, names, strict=True)))


def _read_csv(source: str, options: dict[str, Any], ids: Sequence[str]) -> Any:
    """A CSV in blocks, with nullable types, its id columns as text, names stripped."""
    import dask.dataframe as dd

    def read(text: Sequence[str]) -> Any:
        try:
            return dd.read_csv(source, storage_options=options, blocksize=PARTITION_BYTES,
                               dtype_backend="numpy_nullable", skipinitialspace=True,
                               dtype={name: "string" for name in text})  # fmt: skip
        except FileNotFoundError:
            raise SourceError(f"{source}: source does not exist") from None
        except (OSError, ValueError) as exc:
            raise SourceError(f"{source}: {_csv_problem(exc)}") from None

    frame = read(ids)
    wanted = set(ids)
    spaced = [c for c in frame.columns if str(c).strip() in wanted and str(c) != str(c).strip()]
    if spaced:  # `pre ,x`: the id column's name as the file spells it
        frame = read([*ids, *spaced])
    return _stripped(frame, source)


def _csv_problem(exc: BaseException) -> str:
    """What pandas found wrong with a CSV, in words (without Dask's wrapper)."""
    import pandas as pd

    if isinstance(exc, pd.errors.EmptyDataError):
        return "the file is empty: a table's first line names its columns (x,y,z,...)"
    said = str(exc).rpartition("Original Message: ")[2] or type(exc).__name__
    return f"cannot be read as a CSV ({' '.join(said.split())})"


def _filesystem(source: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(source, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise SourceError(f"{source}: cannot be reached ({exc})") from None
    return fs, path.rstrip("/")


def _parquet_files(fs: Any, path: str) -> list[str]:
    """A folder's Parquet files, in the order a reader lists them (`part.2` before
    `part.10`), at any depth (Hive's `year=2024/`), names starting `_` or `.` left out (Dask's
    `_metadata`, Spark's `_SUCCESS`)."""
    found = [f for f in fs.find(path)
             if not any(p.startswith(("_", ".")) for p in f[len(path) :].split("/"))]  # fmt: skip
    return _natural(found)


def _natural(paths: Sequence[str]) -> list[str]:
    """Paths in the order a person counts them: `part.2` before `part.10`."""
    return sorted(paths, key=lambda f: [int(t) if t.isdigit() else t
                                        for t in re.split(r"(\d+)", f)])  # fmt: skip


def _read_parquet(source: str, options: dict[str, Any]) -> Table:
    """A Parquet file or folder as partitions of about PARTITION_BYTES, its files' schemas
    unified."""
    import dask
    import dask.dataframe as dd
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, path = _filesystem(source, options)
    if re.search(r"[*?\[]", path):  # a glob (`tables/*.parquet`): its files, named in its base
        files = _natural(fs.glob(path))
        path = re.split(r"[*?\[]", path)[0].rpartition("/")[0]
        folder = True
    elif not fs.exists(path):
        raise SourceError(f"{source}: source does not exist")
    else:
        folder = fs.isdir(path)
        files = _parquet_files(fs, path) if folder else [path]
    if not files:
        raise SourceError(f"{source}: no Parquet file is there")
    filesystem = PyFileSystem(FSSpecHandler(fs))
    factory_options = ds.FileSystemFactoryOptions(
        partition_base_dir=path if folder else "", exclude_invalid_files=False,
        partitioning=ds.HivePartitioning.discover(infer_dictionary=False) if folder else None,
    )  # fmt: skip
    factory = ds.FileSystemDatasetFactory(filesystem, files, ds.ParquetFileFormat(),
                                          factory_options)  # fmt: skip
    dataset, fragments = _fragments(factory, files, source, folder, path)
    try:  # the first file's columns with the partitions', then every other file's
        schema = pa.unify_schemas([dataset.schema, *(f.physical_schema for f in fragments)],
                                  promote_options="permissive")  # fmt: skip
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        raise SourceError(_differing(fragments, source, path)) from None
    keep = [f for f in schema if not _INDEX_COLUMN.fullmatch(f.name)]
    schema = pa.schema(keep)
    read = dask.delayed(_read_row_groups)
    pieces, places = [], []
    for fragment in fragments:
        name = fragment.path[len(path) :].lstrip("/") if folder else ""
        first = 0
        for groups, rows in _gathered(fragment):
            pieces.append(read(fragment.subset(row_group_ids=groups), schema))
            places.append((name, first))
            first += rows
    meta = _as_pandas(schema.empty_table())
    if not pieces:
        pieces = [dask.delayed(meta)]
        places = [("", 0)]
    frame = _stripped(dd.from_delayed(pieces, meta=meta, verify_meta=False), source)
    return Table(frame, tuple(frame.to_delayed()), tuple(places) if folder else ())


def _fragments(
    factory: Any, files: Sequence[str], source: str, folder: bool, path: str
) -> tuple[Any, list[Any]]:
    """The dataset and each file's fragment with its footer read (on threads): a file that
    is no Parquet is refused by name."""
    import pyarrow as pa

    def refused(file: str, exc: BaseException) -> SourceError:
        name = file[len(path) :].lstrip("/") if folder else ""
        return SourceError(f"{source}{': ' + name if name else ''}: {_parquet_problem(exc)}")

    try:
        dataset = factory.finish()  # reads the first file's schema
        fragments = list(dataset.get_fragments())
    except (pa.ArrowInvalid, OSError) as exc:
        raise refused(files[0], exc) from None

    def footer(fragment: Any) -> Any:
        try:
            fragment.ensure_complete_metadata()
        except (pa.ArrowInvalid, OSError) as exc:
            raise refused(fragment.path, exc) from None
        return fragment

    with ThreadPoolExecutor(_READERS) as pool:
        return dataset, list(pool.map(footer, fragments))


def _parquet_problem(exc: BaseException) -> str:
    said = " ".join(str(exc).split())
    if "magic bytes" in said or "Parquet file size is 0" in said:
        return "not a Parquet file (a CSV is named .csv)"
    return f"cannot be read as Parquet ({said})"


def _differing(fragments: Sequence[Any], source: str, path: str) -> str:
    """The column two files hold as types that cannot be joined, naming both files."""
    seen: dict[str, tuple[Any, str]] = {}
    for fragment in fragments:
        name = fragment.path[len(path) :].lstrip("/") or fragment.path
        for field in fragment.physical_schema:
            kind = field.type
            if field.name in seen and str(seen[field.name][0]) != str(kind):
                other, where = seen[field.name]
                return (f"{source}: column {field.name!r} is {other} in {where} and {kind} in "
                        f"{name}: write every file with one type per column")  # fmt: skip
            seen.setdefault(field.name, (kind, name))
    return f"{source}: its files' columns cannot be joined into one table"


def _gathered(fragment: Any) -> list[tuple[list[int], int]]:
    """A file's row groups gathered into partitions of about PARTITION_BYTES: (row group
    numbers, rows) each."""
    metadata = fragment.metadata
    parts: list[tuple[list[int], int]] = []
    groups: list[int] = []
    rows = size = 0
    for number in range(metadata.num_row_groups):
        group = metadata.row_group(number)
        if groups and size + group.total_byte_size > PARTITION_BYTES:
            parts.append((groups, rows))
            groups, rows, size = [], 0, 0
        groups.append(number)
        rows += group.num_rows
        size += group.total_byte_size
    if groups:
        parts.append((groups, rows))
    return parts


def _read_row_groups(fragment: Any, schema: Any) -> Any:
    """One partition's rows (a file's row groups), every column of the unified schema: one
    the file lacks is missing in each row."""
    return _as_pandas(fragment.to_table(schema=schema))


def _as_pandas(table: Any) -> Any:
    """Arrow columns as pandas holds them with a gap: integers and booleans nullable (numpy's
    would become float64 where a value is missing, rounding ids)."""
    import pandas as pd
    import pyarrow as pa

    nullable = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(),
                pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
                pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
                pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
                pa.bool_(): pd.BooleanDtype()}  # fmt: skip
    return table.to_pandas(types_mapper=nullable.get)
