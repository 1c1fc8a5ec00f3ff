"""Progress of a long job: shards done of the total (and, where a job runs them, its
preparing tasks: a table's partitions, a volume's mesh blocks), bytes stored, the rate and
the time left, counted against what the job's records plan (`journal.Planned`) in the words
`status` uses.

On a terminal one line is redrawn at most a few times a second; into a file or a pipe (a
Kubernetes pod's log) a line is appended every LOG_INTERVAL_S, so a job of days leaves a log
of readable size; in a Jupyter notebook a progress bar widget shows the same line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from shardwright.common.receipts import Receipt
from shardwright.lifecycle.journal import Planned, prepares, tally
from shardwright.planning.text import human_bytes

REDRAW_INTERVAL_S = 0.25
LOG_INTERVAL_S = 30.0


class Progress:
    """Counts the finished tasks the coordinator has heard of (shard tasks, and the preparing
    tasks some jobs run before them) and the bytes their shards hold; shows them on `out`."""

    def __init__(self, *, out: TextIO | None = None, enabled: bool = True):
        self.out = out or sys.stderr
        self.enabled = enabled
        self.total = 0  # shards planned
        self.estimated = False  # that count is an estimate (shards made from spools)
        self.done = 0  # shards stored (or found empty)
        self.preparing = 0  # preparing tasks planned
        self.unit = "blocks"  # what they are
        self.prepared = 0
        self.bytes = 0
        self.kept = 0  # shards a resumed job found stored already
        self.kept_preparing = 0  # preparing tasks' spools it found stored already
        self.started = time.monotonic()
        self._shown = 0.0
        self._terminal = self.out.isatty()
        self._widget = _notebook_widget() if enabled and out is None else None

    def start(self, planned: Sequence[Planned]) -> None:
        """Count against what each of the job's datasets plans."""
        self.total = sum(p.shards for p in planned)
        self.estimated = any(p.estimated for p in planned)
        self.preparing = sum(p.preparing for p in planned)
        self.unit = next((p.unit for p in planned if p.preparing), self.unit)
        self.started = time.monotonic()

    @property
    def tasks(self) -> tuple[int, int]:
        """(done, planned): the preparing tasks and the shards together."""
        done = self.prepared + self.done
        return done, max(self.preparing, self.prepared) + max(self.total, self.done)

    def add(self, receipts: Iterable[Receipt]) -> None:
        for receipt in receipts:
            # A preparing task's spool is the job's own intermediate (under its control
            # prefix): its bytes are not output.
            if prepares(receipt.key):
                self.prepared += 1
                self.kept_preparing += receipt.resumed
            else:
                self.done += 1
                self.bytes += receipt.size
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
        """`shards 1,234 / 97,336 (1.3 %), 2.1 GiB, 410.0 MiB/s, 1,200 shards/s, 1 h 2 min left`;
        a job with preparing tasks counts them apart and its rate in tasks (`blocks 3 / 4,
        shards 0 / 2 estimated (42.9 %), ..., 0.5 tasks/s, ...`)."""
        seconds = max(now - self.started, 1e-9)
        done, total = self.tasks
        percent = 100.0 * done / total if total else 100.0
        counts = f"shards {tally(self.done, self.total, self.estimated)}"
        if self.preparing:
            counts = f"{self.unit} {tally(self.prepared, self.preparing)}, {counts}"
        unit = "tasks" if self.preparing else "shards"
        text = f"{counts} ({percent:.1f} %), {human_bytes(self.bytes)}"
        rate = done / seconds
        digits = 1 if rate < 10 else 0
        text += f", {human_bytes(self.bytes / seconds)}/s, {rate:,.{digits}f} {unit}/s"
        if self.kept_preparing:
            text += f", {self.kept_preparing:,} {self.unit} and {self.kept:,} shards kept"
        elif self.kept:
            text += f", {self.kept:,} kept"
        if done and total > done:
            text += f", {duration((total - done) * seconds / done)} left"
        return text

    def _show(self, now: float) -> None:
        if self._widget is not None:
            bar, label = self._widget
            done, total = self.tasks
            bar.max, bar.value = max(total, 1), done
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
