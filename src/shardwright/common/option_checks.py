"""What every group of options checks alike (each group checks its own fields in its own
module: `options/`, `generation/options.py`): a whole number, one of a set of choices."""

from __future__ import annotations

from typing import Any

from shardwright.errors import OptionError


def whole(value: Any, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= least


def check_choice(
    options: Any, name: str, choices: tuple[str, ...], what: str, optional: bool = False
) -> None:
    """An option whose value is one of `choices` (or None, where `optional`)."""
    value = getattr(options, name)
    if not (value is None and optional) and value not in choices:
        raise OptionError(f"{{{name}}} is not {what}; choose one of {choices}", **{name: value})
