"""How an option is written on the command line: each field of an options dataclass that the
CLI offers carries a `Flag` in its metadata (its flag, help, and how the text becomes the
value), so the parser is built from the dataclasses and an option is added in one place. The
parsers raise argparse's ArgumentTypeError, whose message argparse shows after the flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from shardwright.errors import OptionError

XYZ = "X,Y,Z"  # the metavar of a three-number option
SIZE_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_xyz(kind: type) -> Callable[[str], tuple[Any, ...]]:
    """A parser of 'x,y,z' into a triple of `kind`."""

    def parse(text: str) -> tuple[Any, ...]:
        parts = text.split(",")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"expected three values x,y,z, got {text!r}")
        try:
            return tuple(kind(p) for p in parts)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad x,y,z value {text!r}: {exc}") from exc

    return parse


def parse_mips(text: str) -> int | str:
    """'auto' or a number of levels above the base."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of levels or 'auto', got {text!r}")
    return value


def parse_ids(text: str) -> tuple[int, ...]:
    """Segment ids: '12,345,678'."""
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        ids = ()
    if not ids or any(not 0 < i < 2**64 for i in ids):
        raise argparse.ArgumentTypeError(f"expected segment ids such as 12,345, got {text!r}")
    return ids


def parse_pair(text: str) -> tuple[str, str]:
    """NAME=VALUE, both non-empty: 'pre=pre_segment_id'."""
    name, equals, value = text.partition("=")
    if not equals or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=COLUMN, got {text!r}")
    return name.strip(), value.strip()


def enum_labels(spec: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """'0:excitatory,1:inhibitory' as (values, labels); ValueError naming what is wrong."""
    values: list[int] = []
    labels: list[str] = []
    for pair in spec.split(","):
        value, colon, label = pair.partition(":")
        try:
            number = int(value)
        except ValueError:
            number = None
        if not colon or not label.strip() or number is None:
            raise ValueError(f"expected VALUE:LABEL (a whole number, a text), got {pair!r}")
        values.append(number)
        labels.append(label.strip())
    if len(set(values)) != len(values):
        raise ValueError(f"a value is labelled twice in {spec!r}")
    return tuple(values), tuple(labels)


def parse_enum(text: str) -> tuple[str, str]:
    """COLUMN (a column of text: its texts are the labels) or COLUMN=VALUE:LABEL,...
    (a column of whole numbers, each labelled)."""
    column, _, labels = text.partition("=")
    try:
        if not column.strip():
            raise ValueError(f"expected COLUMN or COLUMN=VALUE:LABEL,..., got {text!r}")
        if labels.strip():
            enum_labels(labels)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return column.strip(), labels.strip()


def format_size(size: int) -> str:
    """The shortest exact form `parse_size` reads back: 1G, 512M, 1000."""
    for suffix, scale in sorted(SIZE_SUFFIXES.items(), key=lambda item: -item[1]):
        if size and size % scale == 0:
            return f"{size // scale}{suffix.upper()}"
    return str(size)


def parse_json_object(text: str) -> dict[str, Any]:
    """A JSON object (fsspec options): `{"anon": true}`, not a list or a string."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object such as '{{\"anon\": true}}', got {type(value).__name__}"
        )
    return value


def parse_positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def parse_port(text: str) -> int:
    """A TCP port to listen on: 0 (any free one) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port, 0 (any free one) to 65535, got {text!r}"
        )
    return int(text)


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB' or a plain number of bytes."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = SIZE_SUFFIXES.get(value[-1:], 1)
    number = value[:-1] if value[-1:] in SIZE_SUFFIXES else value
    try:
        return int(float(number) * scale)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 512M, 2G)") from exc


def spelled(options: Any) -> None:
    """Read the values of an options dataclass (`options`, in its `__post_init__`) that are
    given as the command line spells them, by the field's own parser: the API takes "2G",
    "4,4,40" or "auto" as the flag does. A text the parser refuses is an OptionError naming
    the field; values of other types are left to the dataclass's own checks."""
    for f, flag in command_line_fields(type(options)):
        value = getattr(options, f.name)
        if flag.repeat:  # a flag given once per value: a tuple of values, each as spelled
            object.__setattr__(options, f.name, _repeated(f, flag, value))
            continue
        if flag.parse is None or not isinstance(value, str):
            continue
        try:
            parsed = flag.parse(value)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else "not a number"
            raise OptionError(f"{{{f.name}}}: {reason}", **{f.name: value}) from None
        object.__setattr__(options, f.name, parsed)


def _repeated(f: dataclasses.Field[Any], flag: Flag, value: Any) -> Any:
    """A repeated flag's values as a tuple, each text read by the flag's parser; None (the
    flag not given on the command line) is the field's default."""
    if value is None:
        return default_of(f)
    if isinstance(value, str) or not isinstance(value, list | tuple):
        each = flag.metavar or "value"
        said = f"{{{f.name}}} takes a list, one {each} each"
        if isinstance(value, str) or (isinstance(value, dict) and "=" in each):
            forms = [value] if isinstance(value, str) else [f"{k}={v}" for k, v in value.items()]
            said += f": {f.name}={forms!r}"
        raise OptionError(said, **{f.name: value})
    items = []
    for item in value:
        try:
            parsed = flag.parse(item) if flag.parse is not None and isinstance(item, str) else item
        except argparse.ArgumentTypeError as exc:
            raise OptionError(f"{{{f.name}}}: {exc}", **{f.name: value}) from None
        items.append(tuple(parsed) if isinstance(parsed, list) else parsed)
    return tuple(items)


@dataclass(frozen=True)
class Flag:
    """How a ConvertOptions field is given on the command line: its flag and help, and either
    how its text becomes the value (`parse`, argparse's `type`; `choices`) or, for a flag
    without a value, the value it sets (`switch`)."""

    name: str
    help: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    switch: Any = None  # None: the flag takes a value
    repeat: bool = False  # given once per value (`--property a --property b`): a tuple


def cli(name: str, help: str | None = None, **how: Any) -> dict[str, Flag]:
    """A field's metadata naming its command-line flag (see Flag)."""
    return {"cli": Flag(name, help, **how)}


def command_line_fields(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """The fields of options dataclass `cls` the command line offers, with their flags, in
    `--help` order."""
    for f in dataclasses.fields(cls):
        if "cli" in f.metadata:
            yield f, f.metadata["cli"]


def option_groups(cls: type) -> Iterator[tuple[str, list[tuple[dataclasses.Field[Any], Flag]]]]:
    """(title, its fields the command line offers) of each group an options dataclass `cls`
    is made of (a base with a `TITLE`), in `--help` order; the fields of `cls` that no group
    declares (a class of one group) form the last, untitled."""
    offered = list(command_line_fields(cls))
    groups = [base for base in reversed(cls.__mro__) if "TITLE" in vars(base)]
    for group in groups:
        own = set(vars(group).get("__annotations__", {}))
        yield group.TITLE, [(f, flag) for f, flag in offered if f.name in own]  # type: ignore[attr-defined]
    grouped = {name for g in groups for name in vars(g).get("__annotations__", {})}
    rest = [(f, flag) for f, flag in offered if f.name not in grouped]
    if rest:
        yield "", rest


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (a fresh one where it has a factory)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default
