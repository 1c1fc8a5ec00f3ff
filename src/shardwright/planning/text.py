"""How plans print numbers: sizes written x,y,z and byte counts in binary units."""

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
