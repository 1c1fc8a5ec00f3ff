"""The values options can take that depend on one another (the options' own module holds
their flags and single checks): mesh generation's, and annotations from tables'."""

from __future__ import annotations

from typing import Any

from shardwright.common.flags import enum_labels
from shardwright.errors import NAMED, OptionError

MAX_MINISHARD_BITS = 20  # a 16 MiB shard index, which readers fetch whole


def whole(value: Any, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= least


def check_annotations(options: Any) -> None:
    """The annotation options: a relationship name once each, a positive limit, an enum's
    column once and its labels readable (whether a source takes them is the planner's to
    say)."""
    for field, form in (("relationships", "NAME=COLUMN"), ("enums", "COLUMN=VALUE:NAME,...")):
        for item in getattr(options, field):
            if not (isinstance(item, tuple) and len(item) == 2
                    and all(isinstance(part, str) for part in item)):  # fmt: skip
                raise OptionError(f"{{{field}}}: each is a text {form} (or a pair of texts), "
                                  f"not {item!r}", **{field: getattr(options, field)})  # fmt: skip
    if options.properties is not None and not all(isinstance(p, str) for p in options.properties):
        raise OptionError("{properties}: each is a column's name", properties=options.properties)
    names = [name for name, _ in options.relationships]
    if len(set(names)) != len(names):
        raise OptionError("{relationships}: each relationship is named once",
                          relationships=options.relationships)  # fmt: skip
    if not whole(options.annotation_limit, 1):
        raise OptionError("{annotation_limit} must be a whole number, 1 or more",
                          annotation_limit=options.annotation_limit)  # fmt: skip
    columns = [column for column, _ in options.enums]
    if len(set(columns)) != len(columns):
        raise OptionError("{enums}: each column is named once", enums=options.enums)
    for column, spec in options.enums:
        try:
            enum_labels(spec) if spec else None
        except ValueError as exc:
            raise OptionError(f"{{enums}} of column {column!r}: {exc}", enums=spec) from None


def check_storage_options(options: Any) -> None:
    """Both stores' fsspec options are dicts."""
    for name in ("storage_options", "source_storage_options"):
        if not isinstance(value := getattr(options, name), dict):
            raise OptionError(f"{{{name}}} must be a dict of fsspec options, not "
                              f"{type(value).__name__}", **{name: NAMED})  # fmt: skip


def check_numbers(options: Any) -> None:
    """Sharding bits, the timeout and the pyramid's levels within their ranges."""
    for name, most in (("preshift_bits", 64), ("minishard_bits", MAX_MINISHARD_BITS),
                       ("shard_bits", 64)):  # fmt: skip
        value = getattr(options, name)
        if value is not None and (isinstance(value, bool) or not 0 <= value <= most):
            raise OptionError(
                f"{{{name}}} must be in 0..{most}, got {value}"
                + (" (each shard's index holds 16 bytes per minishard: 2^20 of them "
                   "make 16 MiB)" if name == "minishard_bits" else ""),
                **{name: NAMED},
            )  # fmt: skip
    if not options.timeout > 0:
        raise OptionError("{timeout} must be a positive number of seconds", timeout=options.timeout)
    if (
        options.mips is not None
        and options.mips != "auto"
        and (
            isinstance(options.mips, bool) or not isinstance(options.mips, int) or options.mips < 0
        )
    ):
        raise OptionError(
            f"{{mips}} must be a non-negative integer or 'auto', got {options.mips!r}",
            mips=NAMED,
        )


def check_choice(
    options: Any, name: str, choices: tuple[str, ...], what: str, optional: bool = False
) -> None:
    """An option whose value is one of `choices` (or None, where `optional`)."""
    value = getattr(options, name)
    if not (value is None and optional) and value not in choices:
        raise OptionError(f"{{{name}}} is not {what}; choose one of {choices}", **{name: value})
