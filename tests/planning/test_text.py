"""How plans print numbers: sizes x first, byte counts in binary units, counted nouns."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.planning.text import counted, human_bytes, xyz


def test_sizes_are_written_x_first_with_the_separator_asked_for() -> None:
    assert xyz((64, 64, 32)) == "64 x 64 x 32"
    assert xyz([1, 2.5, "z"], ",") == "1,2.5,z"
    assert xyz(iter((7,))) == "7"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (3 * 1024**2, "3.0 MiB"),
        (5 * 1024**3 + 512 * 1024**2, "5.5 GiB"),
        (2 * 1024**4, "2.0 TiB"),
        (1024**5, "1024.0 TiB"),  # no unit above TiB
        (-2048, "-2.0 KiB"),
    ],
)
def test_byte_counts_use_binary_units(n: int, text: str) -> None:
    assert human_bytes(n) == text


@given(st.integers(0, 2**60))
def test_a_byte_count_reads_back_within_its_rounding(n: int) -> None:
    number, unit = human_bytes(n).split()
    power = ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)
    assert abs(float(number) * 1024**power - n) <= 0.05 * 1024**power + 0.5
    assert power == 4 or float(number) < 1024  # the largest unit that keeps it below 1024
    assert power == 0 or n >= 1024**power


@pytest.mark.parametrize(
    ("n", "text"),
    [(1, "1 shard"), (0, "0 shards"), (2, "2 shards"), (1234567, "1,234,567 shards")],
)
def test_counts_carry_their_noun_plural_unless_one(n: int, text: str) -> None:
    assert counted(n, "shard") == text
    assert re.fullmatch(r"[\d,]+ shards?", text)
