"""A job's run and the store it writes through: what fencing rests on, kept out of stores/.

A store that a job's run writes through is a `FencedStore` around the destination's store:
its temporaries carry the run's id (the inner store's writer), and its fence (fencing.py) is
asked before each data object (every key outside `CONTROL_PREFIX`) is written. Where the
backend can make a write conditional (S3, GCS), a fenced write also expects the object at its
key to be as it was just before the fence was asked: a job that took the lease over writes
only after, so a write of ours delayed past one of its writes (a worker cut off or frozen
between its fence and its upload) fails its condition instead of replacing it. Every other
request passes straight through to the inner store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

from shardwright.common.control_keys import CONTROL_PREFIX
from shardwright.errors import StoreError
from shardwright.formats.shardfile import Piece
from shardwright.stores import Store
from shardwright.stores.base import Data, Expected

# Its folder: one in a folder of the destination marks a dataset nested there (a volume's
# meshes), with jobs of its own (whose temporaries a cleanup of ours leaves alone).
CONTROL_DIR = CONTROL_PREFIX.rstrip("/")
CONDITIONAL_ATTEMPTS = 3  # fenced writes whose object another writer changed meanwhile
Fence = Callable[[Store], None]


@dataclasses.dataclass(frozen=True)
class JobRun:
    """One run of a job writing a destination: `job` is the job's fingerprint digest (what
    its receipts name), `run` this attempt's id, `lease` the key of the lease it holds.
    `fence`, when set, raises before a data object is written once the run may no longer
    write (a module-level function, so it pickles with the store to every worker).
    `writes_new`: the run's data objects are expected absent (a new or resumed job, not an
    overwrite), so its conditional writes assume so and look an object up only after one
    fails."""

    job: str
    run: str
    lease: str
    fence: Fence | None = dataclasses.field(default=None, compare=False, repr=False)
    writes_new: bool = False


def run_of(store: Store) -> JobRun | None:
    """The run `store` writes for, None for a plain store."""
    return store.run if isinstance(store, FencedStore) else None


class FencedStore(Store):
    """`inner`, written by `run`: each data write fenced (see the module's docstring), every
    other request passed through. Pickles as (inner store, run), so a worker's copy opens its
    own inner store and asks the same fence."""

    inner: Store
    run: JobRun

    def __init__(self, inner: Store, run: JobRun):
        if isinstance(inner, FencedStore):
            inner = inner.inner
        if inner.writer != run.run:
            inner = inner.with_writer(run.run)
        super().__init__(inner.url, inner.storage_options, run.run)
        self.inner = inner
        self.run = run
        self.requests = inner.requests  # counted with the inner store's

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.inner, self.run))

    def with_writer(self, writer: str | None) -> Self:
        raise TypeError(f"{self!r} writes for its run {self.run.run}, no other writer")

    def __repr__(self) -> str:
        return f"FencedStore({self.url!r})"

    @property
    def root(self) -> str:
        return self.inner.root

    # -- writes -----------------------------------------------------------------------------
    def write_object(
        self, key: str, data: Data, expected: Expected | None = None, *, size: int | None = None
    ) -> tuple[int, int]:
        """A data object written only while the fence lets the run write, and (where the
        backend can) only if it is still as looked up before the fence was asked; a control
        object, or a write given its own condition, as the inner store writes it."""
        fence = self.run.fence
        if fence is None or expected is not None or key.startswith(CONTROL_PREFIX):
            return self.inner.write_object(key, data, expected, size=size)
        pieces = data if callable(data) else (lambda: [data])
        for attempt in range(CONDITIONAL_ATTEMPTS):
            # Looked up before the fence (see the module's docstring); absent needs no look.
            assume_absent = self.run.writes_new and attempt == 0 and self.conditional_writes()
            condition = Expected(None) if assume_absent else self.inner.expected(key)
            fence(self)
            try:
                return self.inner.write_object(key, pieces, condition, size=size)
            except FileExistsError:  # changed since we looked: by a job that took the lease
                self.requests.add("conflicts")  # over (the fence stops us), or our own retry
        raise StoreError(
            f"{self.url}/{key}: changed by another writer each time this job was about to "
            f"write it ({CONDITIONAL_ATTEMPTS} times); is another process writing this "
            "destination outside shardwright?"
        )

    def _write_whole(
        self,
        key: str,
        pieces: Callable[[], Iterable[Piece]],
        expected: Expected | None,
        size: int | None = None,
    ) -> tuple[int, int]:
        return self.inner.write_object(key, pieces, expected, size=size)

    def conditional_writes(self) -> bool:
        return self.inner.conditional_writes()

    def expected(self, key: str) -> Expected | None:
        return self.inner.expected(key)

    def create_exclusive(self, key: str, data: bytes) -> None:
        self.inner.create_exclusive(key, data)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def remove_stale_temporaries(
        self, *, nested_marker: str | None, keep_writer: str | None = None
    ) -> int:
        return self.inner.remove_stale_temporaries(
            nested_marker=nested_marker, keep_writer=keep_writer
        )

    # -- reads ------------------------------------------------------------------------------
    def read(self, key: str, *, small: bool = False) -> bytes:
        return self.inner.read(key, small=small)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.read_range(key, start, end)

    def read_many(self, keys: Sequence[str], *, small: bool = False) -> dict[str, bytes | None]:
        return self.inner.read_many(keys, small=small)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list_keys(self, prefix: str = "") -> list[str]:
        return self.inner.list_keys(prefix)

    def sizes_below(self, prefix: str = "") -> dict[str, int]:
        return self.inner.sizes_below(prefix)

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        return self.inner.list_sizes(prefix)

    def is_empty(self) -> bool:
        return self.inner.is_empty()

    def first_entry(self) -> str | None:
        return self.inner.first_entry()

    def is_file(self) -> bool:
        return self.inner.is_file()
