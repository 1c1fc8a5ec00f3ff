"""How plans and summaries print numbers: sizes written x,y,z, byte counts in binary units,
counts of things with their noun."""

from __future__ import annotations

from collections.abc import Iterable


def xyz(values: Iterable[object], sep: str = " x ") -> str:
    """`64 x 64 x 32`: a size as the plan report and the errors write it (x first)."""
    return sep.join(str(v) for v in values)


def human_bytes(n: float) -> str:
    """`1.5 MiB`: a byte count in binary units, whole bytes below 1 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def counted(n: int, noun: str) -> str:
    """`1 shard`, `1,234 chunks`: a count with thousands separators and its noun, plural
    where it is not one."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
