"""The output formats' drivers, found by name (`planning/formats.py`): every format has one,
only those a conversion writes have a planner, and a format's options are refused by the
others in the words the user reads."""

from __future__ import annotations

import pytest

from shardwright.common.vocabulary import ADDED_ONLY_FORMATS, OutputFormat
from shardwright.errors import OptionError
from shardwright.options import FORMATS, ConvertOptions
from shardwright.planning.formats import (
    FormatDriver,
    check_options_for_format,
    conversion_formats,
    driver,
)


def test_every_format_has_a_driver_and_only_conversion_formats_a_planner() -> None:
    for member in OutputFormat:
        found = driver(member.value)
        assert isinstance(found, FormatDriver), member
        assert callable(found.cpu_shard) and callable(found.batched_shard), member
        assert (found.planner is None) == (member in ADDED_ONLY_FORMATS), member
    assert sorted(conversion_formats()) == sorted(FORMATS)
    assert OutputFormat.ZARR2 not in FORMATS  # Zarr v2 is only added to an OME-Zarr 0.4 group


def test_a_driver_is_imported_once() -> None:
    assert driver("zarr3") is driver("zarr3")


@pytest.mark.parametrize(
    ("chosen", "given", "owner"),
    [
        ("zarr3", {"minishard_bits": 2}, "precomputed"),
        ("precomputed", {"shard_shape": (2, 2, 2)}, "zarr3"),
    ],
)
def test_another_formats_option_is_refused_naming_both(
    chosen: str, given: dict[str, object], owner: str
) -> None:
    options = ConvertOptions(format=chosen, **given)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=f"{owner} output; {chosen} output ignores it"):
        check_options_for_format(options)
