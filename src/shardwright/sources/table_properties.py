"""A table's property columns: which are properties and why the others are not, what each
holds (numbers, or text or whole numbers named by --enum) and what `--property COLUMN=VALUE`
writes where one is empty. Used by tables.py's `annotation_columns`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardwright.common.flags import enum_labels
from shardwright.errors import NAMED, SourceError
from shardwright.formats.precomputed.annotations import AnnotationProperty
from shardwright.sources.tables_values import is_textual, number_type, property_type


def property_fills(properties: Sequence[str], where: str) -> dict[str, str]:
    """What each `COLUMN=VALUE` property asks to write where its column is empty (a number,
    or nan)."""
    fills = {}
    for given in properties:
        name, has_fill, value = given.partition("=")
        if not has_fill:
            continue
        try:
            float(value)
        except ValueError:
            raise SourceError(f"{where}: {{properties}} {given!r}: {value!r} is no number (give "
                              "COLUMN=VALUE, VALUE a number or nan, to write it where the "
                              "column is empty)", properties=NAMED) from None  # fmt: skip
        value = value.strip()
        fills[name] = "nan" if value.lower() == "nan" else value
    return fills


def check_property(name: str, dtype: Any, enum: bool, where: str) -> None:
    """A column named by --property holds numbers, or text named by --enum."""
    if number_type(dtype) is not None or enum:
        return
    if is_textual(dtype):
        raise SourceError(f"{where}: property column {name!r} holds text; a property holds "
                          "numbers: {enums} makes its texts the names of numbers",
                          enums=[name])  # fmt: skip
    raise SourceError(f"{where}: property column {name!r} holds {dtype}; properties are "
                      "numbers (uint8 ... int32, float32)")  # fmt: skip


def why_left_out(name: str, dtype: Any, chosen: bool) -> str:
    """Why a column is no property: not named by --property, text without --enum, or a type
    that is no number."""
    if chosen:
        return "not a --property"
    if is_textual(dtype):
        return f"text: --enum {name} makes it a property shown by name"
    return f"{dtype}: not numbers"


def enum_property(column: str, dtype: Any, spec: str | None, where: str) -> AnnotationProperty:
    """A column's property: named values where `spec` gives them (whole numbers only), a
    column of text to be named from its rows ("": its type decided then), else a number."""
    number = number_type(dtype)
    if spec is None:
        assert number is not None  # chosen as numbers, or refused by check_property
        return AnnotationProperty(column, property_type(number))
    if spec == "":
        if number is not None:
            raise SourceError(f"{where}: column {column!r} holds numbers: name them with "
                              f"--enum {column}=VALUE:NAME,...")  # fmt: skip
        return AnnotationProperty(column, "uint16")
    if number is None or number.kind == "f":
        raise SourceError(f"{where}: column {column!r} holds {dtype}; --enum {column}=VALUE:NAME "
                          "names whole numbers (a column of text takes --enum COLUMN)")  # fmt: skip
    values, labels = enum_labels(spec)
    return AnnotationProperty(column, property_type(number), None, values, labels)
