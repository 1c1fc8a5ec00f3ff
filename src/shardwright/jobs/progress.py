"""Progress of a long job: shards (or tasks) done of the total, bytes stored, the rate and the
time left.

On a terminal one line is redrawn at most a few times a second; into a file or a pipe (a
Kubernetes pod's log) a line is appended every LOG_INTERVAL_S, so a job of days leaves a log
of readable size; in a Jupyter notebook a progress bar widget shows the same line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from shardwright.lifecycle.manifest import Receipt
from shardwright.lifecycle.runs import CONTROL_PREFIX
from shardwright.planning.text import human_bytes

REDRAW_INTERVAL_S = 0.25
LOG_INTERVAL_S = 30.0


class Progress:
    """Counts finished tasks (shard tasks, and the partitions or blocks some jobs run before
    them) and the bytes they stored; shows them on `out`."""

    def __init__(self, total: int = 0, *, out: TextIO | None = None, enabled: bool = True):
        self.total = total
        self.out = out or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.bytes = 0
        self.kept = 0  # shards a resumed job found stored already
        self.unit = "shards"
        self.started = time.monotonic()
        self._shown = 0.0
        self._terminal = self.out.isatty()
        self._widget = _notebook_widget() if enabled and out is None else None

    def start(self, total: int, unit: str = "shards") -> None:
        """`unit`: what the line counts, "tasks" where some tasks (a table's partitions, a
        volume's mesh blocks) store no shard."""
        self.total, self.unit = total, unit
        self.started = time.monotonic()

    def add(self, receipts: Iterable[Receipt]) -> None:
        for receipt in receipts:
            self.done += 1
            # Bytes of the datasets' objects: a block's spool of generated objects is the
            # job's own intermediate (under its control prefix), not output.
            self.bytes += 0 if receipt.key.startswith(CONTROL_PREFIX) else receipt.size
            self.kept += receipt.resumed
        now = time.monotonic()
        interval = REDRAW_INTERVAL_S if self._terminal or self._widget else LOG_INTERVAL_S
        if self.enabled and now - self._shown >= interval:
            self._shown = now
            self._show(now)

    def finish(self) -> None:
        if self.enabled:
            self._show(time.monotonic())
            if self._terminal and self._widget is None:
                print(file=self.out, flush=True)

    def line(self, now: float) -> str:
        """`shards 1,234 / 97,336 (1.3 %), 2.1 GiB, 410.0 MiB/s, 1,200 shards/s, 1 h 2 min left`
        (`tasks` for `shards` where the job has preparing tasks)"""
        seconds = max(now - self.started, 1e-9)
        total = max(self.total, self.done)
        percent = 100.0 * self.done / total if total else 100.0
        text = f"{self.unit} {self.done:,} / {total:,} ({percent:.1f} %), {human_bytes(self.bytes)}"
        rate = self.done / seconds
        digits = 1 if rate < 10 else 0
        text += f", {human_bytes(self.bytes / seconds)}/s, {rate:,.{digits}f} {self.unit}/s"
        if self.kept:
            text += f", {self.kept:,} kept"
        if self.done and total > self.done:
            text += f", {duration((total - self.done) * seconds / self.done)} left"
        return text

    def _show(self, now: float) -> None:
        if self._widget is not None:
            bar, label = self._widget
            bar.max, bar.value = max(self.total, self.done, 1), self.done
            label.value = self.line(now)
        elif self._terminal:
            print(f"\r{self.line(now)}\033[K", end="", file=self.out, flush=True)
        else:
            print(self.line(now), file=self.out, flush=True)


def duration(seconds: float) -> str:
    """3 s, 4 min 10 s, 2 h 5 min, 3 d 4 h."""
    seconds = round(seconds)
    for unit, size, small, small_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if seconds >= size:
            return f"{seconds // size} {unit} {seconds % size // small_size} {small}"
    return f"{seconds} s"


def _notebook_widget() -> Any:
    """A progress bar and its line, displayed in the notebook cell running the job; None
    outside a Jupyter kernel or without ipywidgets."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        import ipywidgets
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    if get_ipython() is None:
        return None
    bar, label = ipywidgets.IntProgress(min=0, max=1), ipywidgets.Label()
    display(ipywidgets.HBox([bar, label]))
    return bar, label
