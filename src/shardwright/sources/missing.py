"""Source chunks that are not there: refused, or filled and counted — never a silent zero.

A precomputed chunk that is absent is an error unless the user asked for `--fill-missing`
(what CloudVolume's `fill_missing=False` and Igneous do); a zarr or N5 chunk that is absent is
the fill value by its format's own rule, so it converts, and is counted. Sources say what
they found through `account`; whoever wants the count (a shard task for its receipt, the
planner's sample, `verify`) opens a `Tally` around its reads with `counting()`. The tally
lives in a context variable: the reads happen in the thread that opened it (a shard task's
producer), or in threads started with a copy of its context (`in_context`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from shardwright.errors import SourceError

T = TypeVar("T")
EXAMPLES = 5  # chunk keys a message or a record names


class MissingChunksError(SourceError):
    """Source chunks absent where the format says absence is no value (precomputed, a gap in
    a TIFF stack): the job stops before its manifest."""


@dataclass
class Tally:
    """Source chunks looked at and found absent, with the first few absent keys."""

    looked_at: int = 0
    missing: int = 0
    examples: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, looked_at: int, missing_keys: Sequence[str]) -> None:
        with self._lock:
            self.looked_at += looked_at
            self.missing += len(missing_keys)
            room = EXAMPLES - len(self.examples)
            if room > 0:
                self.examples.extend(missing_keys[:room])

    @property
    def fraction(self) -> float:
        return self.missing / self.looked_at if self.looked_at else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"looked_at": self.looked_at, "missing": self.missing, "examples": self.examples}


_CURRENT: contextvars.ContextVar[Tally | None] = contextvars.ContextVar(
    "shardwright_missing_tally", default=None
)


@contextlib.contextmanager
def counting() -> Iterator[Tally]:
    """Count the source chunks read (and found absent) inside the block."""
    tally = Tally()
    token = _CURRENT.set(tally)
    try:
        yield tally
    finally:
        _CURRENT.reset(token)


def is_counting() -> bool:
    """Whether anyone counts: a source may skip the work of finding absent chunks if not."""
    return _CURRENT.get() is not None


def in_context(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, run in a copy of the caller's context: a worker thread's reads are counted in the
    tally its caller opened."""
    context = contextvars.copy_context()

    def run(*args: Any) -> T:
        return context.copy().run(fn, *args)

    return run


def account(
    url: str,
    absent: Sequence[str],
    *,
    owned: int,
    owned_absent: Sequence[str],
    fill_missing: bool,
    fill_value: Any = 0,
    what: str = "source chunk",
    scope: str = "",
) -> None:
    """Record what a box read found. `absent`: every absent chunk the read touched, refused
    unless `fill_missing` (naming how many, the first few, and the flag that fills them);
    `owned` / `owned_absent`: the chunks whose first voxel lies in the box, and the absent
    ones among them, which the tally counts, so that a chunk read in parts by several boxes
    (shards, epochs) is counted once."""
    if absent and not fill_missing:
        shown = ", ".join(absent[:EXAMPLES])
        more = f" and {len(absent) - EXAMPLES} more" if len(absent) > EXAMPLES else ""
        raise MissingChunksError(
            f"{url}: {len(absent)} {what}{'s' if len(absent) != 1 else ''} "
            f"{scope + ' ' if scope else ''}missing ({shown}{more}); nothing stored there may "
            "mean data that was never written or was lost. Pass {fill_missing} to write "
            f"{fill_value} there instead",
            fill_missing=True,
        )
    tally = _CURRENT.get()
    if tally is not None:
        tally.add(owned, owned_absent)


def fill_of(source: object) -> str:
    """The value a source's absent chunks are read, and written, as: its `fill_value` (a zarr
    or N5 array's own: 255, NaN), else 0 (precomputed chunks, TIFF slices)."""
    value = np.asarray(getattr(source, "fill_value", 0)).item()
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:g}"
    return str(value)


def owns(cell: Sequence[int], chunk: Sequence[int], box_start: Sequence[int]) -> bool:
    """Whether a box owns grid cell `cell` (of chunks of shape `chunk`) that it overlaps: the
    chunk's first voxel is not before the box's first in any dimension."""
    return all(g * n >= b for g, n, b in zip(cell, chunk, box_start, strict=True))
