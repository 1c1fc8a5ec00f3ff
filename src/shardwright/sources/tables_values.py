"""What a table column's values are, whatever pandas or Arrow type holds them.

Labs hand over numbers in numpy types, pandas' nullable ones (`Int64`, `UInt64`, `Float64`,
`boolean`: a CSV is read into these, so that a missing value in a later block keeps its
column's type), Arrow-backed ones and categoricals of numbers: every one of them is a number
(`number_type`). A missing value (None, NA, NaN, an empty CSV field) is found the same way in
each (`missing`). Segment ids are read exactly (`segment_ids`): from integers as they are,
from text digit by digit (a CSV's id columns are read as text: a float64 column, which pandas
makes of integers with a gap, would round ids above 2**53), and from floats only where they
are exact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwright.errors import SourceError
from shardwright.formats.precomputed.annotations import AnnotationProperty

MAX_ID = 2**64 - 1
# Neuroglancer's integer property types, narrowest first, and their ranges.
INTEGER_TYPES = [(name, np.iinfo(name)) for name in
                 ("uint8", "int8", "uint16", "int16", "uint32", "int32")]  # fmt: skip
EXACT_FLOAT = 2**53  # a float64 holds every whole number below this, and not all above
_DIGITS = r"\d{1,20}(?:\.0*)?"  # a whole number as text ("12", or "12.0" as pandas writes)


def number_type(dtype: Any) -> np.dtype | None:
    """The numpy type of a column of numbers (bool, integers, floats: numpy's, pandas'
    nullable and Arrow-backed ones, a categorical's categories); None for anything else."""
    categories = getattr(dtype, "categories", None)
    if categories is not None:  # a pandas categorical: its categories' type
        return number_type(categories.dtype)
    if getattr(dtype, "kind", None) not in ("b", "i", "u", "f"):
        return None
    try:
        return np.dtype(getattr(dtype, "numpy_dtype", dtype))
    except TypeError:
        return None


def is_textual(dtype: Any) -> bool:
    """Text (CSV fields that are not all numbers): object, pandas' string types, or a
    categorical of texts."""
    categories = getattr(dtype, "categories", None)
    if categories is not None:
        return is_textual(categories.dtype)
    return str(dtype) in ("object", "string", "str") or str(dtype).startswith("string")


def missing(series: Any) -> npt.NDArray[np.bool_]:
    """Where a column has no value: None, NA, NaN, an empty CSV field."""
    return np.asarray(series.isna(), dtype=bool)


def as_float(series: Any) -> npt.NDArray[np.float64]:
    """A column's values as float64: NaN where a value is missing or is not a number."""
    import pandas as pd

    if number_type(series.dtype) is None:
        series = pd.to_numeric(series, errors="coerce")
    return np.asarray(series.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)


def first(mask: npt.NDArray[np.bool_]) -> int | None:
    """The first row where `mask` holds, or None."""
    return int(np.argmax(mask)) if mask.any() else None


@dataclass(frozen=True)
class Ids:
    """A column of segment ids read exactly: the ids (0 where missing or unreadable), where a
    value is missing, and the first row holding something else (row, what it holds)."""

    values: npt.NDArray[np.uint64]
    missing: npt.NDArray[np.bool_]
    problem: tuple[int, str] | None = None


def segment_ids(series: Any) -> Ids:
    """A column's uint64 ids, exactly, from integers, whole floats below 2**53, or text."""
    import pandas as pd

    absent = missing(series)
    if isinstance(series.dtype, pd.CategoricalDtype):
        categories = segment_ids(pd.Series(series.cat.categories))
        codes = np.asarray(series.cat.codes, dtype=np.int64)
        values = np.where(absent, np.uint64(0), categories.values[np.maximum(codes, 0)])
        if categories.problem is not None:
            row = first(codes == categories.problem[0])
            if row is not None:
                return Ids(values, absent, (row, categories.problem[1]))
        return Ids(values, absent)
    number = number_type(series.dtype)
    if number is not None and number.kind in "biu":
        values = series.to_numpy(dtype=number, na_value=0)
        negative = first(values < 0) if number.kind == "i" else None
        if negative is not None:
            return Ids(np.zeros(len(values), np.uint64), absent,
                       (negative, f"holds {values[negative]}, a negative number"))  # fmt: skip
        return Ids(values.astype(np.uint64), absent)
    if number is not None:
        floats = as_float(series)
        bad = ~absent & (~np.isfinite(floats) | (floats < 0) | (floats != np.floor(floats)))
        wrong = first(bad)
        if wrong is not None:
            return Ids(np.zeros(len(floats), np.uint64), absent,
                       (wrong, f"holds {float(floats[wrong])!r}, not a whole number"))  # fmt: skip
        inexact = first(~absent & (floats >= EXACT_FLOAT))
        if inexact is not None:
            return Ids(np.zeros(len(floats), np.uint64), absent, (inexact, (
                f"holds {int(floats[inexact])} in a floating-point column, which rounds ids "
                "above 2**53: store the column as integers (uint64, or pandas' UInt64 where "
                "values are missing)")))  # fmt: skip
        return Ids(np.where(absent, 0, floats).astype(np.uint64), absent)
    return _ids_of_text(series, absent)


def _ids_of_text(series: Any, absent: npt.NDArray[np.bool_]) -> Ids:
    """Ids written as text (a CSV's, or Python ints too large for int64): digits at once,
    else one by one with spaces around them, `12.0` as pandas writes a float, and an empty
    text as missing."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pa.array(series.astype("string"), from_pandas=True)
    try:
        exact = pc.cast(texts, pa.uint64())  # digits only: a clean column, at once
        return Ids(exact.fill_null(0).to_numpy(zero_copy_only=False), absent)
    except pa.ArrowInvalid:
        pass
    texts = pc.utf8_trim_whitespace(texts)
    absent = absent | pc.fill_null(pc.equal(texts, ""), True).to_numpy(zero_copy_only=False)
    digits = pc.replace_substring_regex(texts, r"\.0*$", "")
    fits = pc.and_(pc.match_substring_regex(texts, f"^{_DIGITS}$"),
                   pc.less_equal(pc.utf8_lpad(digits, 20, "0"), str(MAX_ID)))  # fmt: skip
    fits = pc.fill_null(fits, False).to_numpy(zero_copy_only=False)
    bad = first(~absent & ~fits)
    if bad is not None:
        given = series.iloc[bad]
        return Ids(np.zeros(len(series), np.uint64), absent,
                   (bad, f"holds {given!r}, not a uint64 id"))  # fmt: skip
    values = pc.cast(pc.if_else(pa.array(fits), digits, "0"), pa.uint64())
    return Ids(values.to_numpy(zero_copy_only=False), absent)


def property_type(kind: np.dtype) -> str:
    """Neuroglancer's type for a column of numbers; wider integers are narrowed once the rows
    show their range (`narrowed`), wider floats stored as float32."""
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
    return dataclasses.replace(prop, type=narrowest(prop.id, low, high, where))


def narrowest(column: str, low: float, high: float, where: str) -> str:
    """The narrowest of Neuroglancer's integer types holding [low, high]."""
    for name, info in INTEGER_TYPES:
        if info.min <= low and high <= info.max:
            return name
    raise SourceError(
        f"{where}: column {column!r} holds values from {low:.0f} to {high:.0f}; Neuroglancer "
        "properties are at most 32-bit integers (or float32): scale or split the column"
    )


def text_codes(prop: AnnotationProperty, texts: Any) -> np.ndarray:
    """A text column's values as the numbers its names stand for (every text is a name:
    the plan read them all)."""
    names = np.asarray(prop.enum_labels)
    return np.searchsorted(names, np.asarray(texts, dtype=str)).astype(prop.type)


def property_floats(series: Any, fill: str | None = None) -> np.ndarray:
    """A property column's values as float64, `fill` (a number, or nan) where it is empty."""
    values = as_float(series)
    return values if fill is None else np.where(missing(series), float(fill), values)


def property_values(prop: AnnotationProperty, series: Any, fill: str | None = None) -> np.ndarray:
    """A checked column of numbers as its property's type, `fill` where it is empty."""
    return property_floats(series, fill).astype(prop.type)
