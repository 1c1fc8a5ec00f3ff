"""Which files a piece of code opens for reading, seen by Python's audit hook on `open`
(the interpreter's own event, not a patched function): what a job running in this process
(`scheduler="sync"`) fetched of a dataset stored on local disk, one open per chunk read."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

_watching: list[tuple[str, Counter[str]]] = []
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _watching or not isinstance(args[0], str | os.PathLike):
        return
    mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
    if any(flag in mode for flag in "wax+"):
        return
    path = os.fspath(args[0])
    for folder, counts in _watching:
        if path.startswith(folder) and os.path.isfile(path):  # a name tried, not there: none
            counts[os.path.relpath(path, folder)] += 1


@contextlib.contextmanager
def opened_below(folder: str | os.PathLike[str]) -> Iterator[Counter[str]]:
    """Within, every file below `folder` opened for reading (path relative to it: opens)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)  # an audit hook stays for the process: it is one, idle here
        _installed = True
    entry = (os.path.join(os.fspath(folder), ""), Counter[str]())
    _watching.append(entry)
    try:
        yield entry[1]
    finally:
        _watching.remove(entry)
