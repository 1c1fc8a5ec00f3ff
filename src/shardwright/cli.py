"""Command line front end (thin: it calls the same functions a notebook calls)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    return 0
