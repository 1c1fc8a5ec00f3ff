"""The Store protocol: a dataset root whose keys are '/'-separated paths, written whole.

Every object is written once and whole (ARCHITECTURE invariant 1): a reader never finds a
torn object at a key. How that is done differs per backend (local.py: a temporary renamed into
place; memory.py: one assignment; fsspec_store.py: an upload that becomes visible complete),
as does creating an object only if it is absent, and writing one only if it is still absent or
still at the version looked up before (`Expected`, TensorStore's `if_equal`), where the
backend can (S3, GCS). What all backends share is here: a store pickles as its URL, options
and writer (a worker opens its own), and requests are counted and retried, the first one
under the deadline (deadlines.py). Which backend a URL gets is `registry.py`'s table
(`open_store`).

A store knows nothing of jobs. It may carry a writer, an opaque id (a job's run, given by
lifecycle/): its temporaries are named after it, so that the next writer can tell whose are
stale, and a writer can be halted in a process (`halt`): whoever wrote for it stopped there
while a request of it still waited, and nothing more may be requested for it once the store
answers again. A job's fencing (its lease checked before each data write, the write made
conditional) is a wrapper around a store: lifecycle/runs.py.
"""

from __future__ import annotations

import abc
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Self, TypeVar

from shardwright.common import deadlines
from shardwright.errors import StoreError
from shardwright.formats.shardfile import Piece
from shardwright.stores.retry import (
    DEFAULT_POLICY,
    GaveUp,
    RequestCounter,
    call_with_retries,
    secret_strings,
)

FIRST_CONTACT_ATTEMPTS = 4  # tries of a store's first request, within the deadline
# Temporaries: the names whole writes go through on disk (local.py), hidden from listings.
# A storage concern: how a backend keeps objects whole, whoever writes them.
TMP_MARKER = ".shardwright-tmp-"
T = TypeVar("T")
Data = bytes | bytearray | memoryview | Callable[[], Iterable[Piece]]
_HALTED: dict[str, str] = {}  # writer -> why this process makes no more requests for it


def halt(writer: str, why: str) -> None:
    """From now on every request this process makes for `writer` raises StoreError(`why`)."""
    _HALTED[writer] = why


def halted(writer: str) -> str | None:
    """Why `writer` is halted in this process, None if it is not."""
    return _HALTED.get(writer)


@dataclasses.dataclass(frozen=True)
class Expected:
    """A conditional write's condition: the object at its key is still at `version` (an S3
    ETag, a GCS generation), or still absent (None)."""

    version: str | None


class Store(abc.ABC):
    """A dataset root: keys are '/'-separated paths below it. `open_store(url)` (registry.py)
    gives the backend for the URL; each backend implements the operations below."""

    is_local: ClassVar[bool] = False  # plain files on this machine's disk
    is_process_local: ClassVar[bool] = False  # other Dask worker processes cannot see it

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        writer: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.writer = writer  # names its temporaries; can be halted (see the module's doc)
        self._answered = False  # has the store answered a request yet (deadlines.py)
        self.requests = RequestCounter()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its URL, options and writer: a worker opens its own filesystem and
        counts its own requests."""
        return (type(self), (self.url, self.storage_options, self.writer))

    def with_writer(self, writer: str | None) -> Self:
        """The same destination, written for `writer`; its requests are counted with this
        store's."""
        other = type(self)(self.url, self.storage_options, writer)
        other.requests = self.requests
        other._answered = self._answered
        return other

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    @abc.abstractmethod
    def root(self) -> str:
        """The root as the backend names it (a local path, `bucket/prefix`, ...)."""

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    # -- writes -----------------------------------------------------------------------------
    def write_object(
        self, key: str, data: Data, expected: Expected | None = None, *, size: int | None = None
    ) -> tuple[int, int]:
        """Write one whole object; returns (size, crc32c). Never leaves a partial object at key.

        `data` is the bytes, or a function returning the pieces in order (called again if an
        upload must be retried, so a spooled shard is streamed, never held whole in memory).
        With `expected` (as `expected(key)` looked it up), only if the object at `key` is still
        as expected: FileExistsError if another write changed it meanwhile. `size`: the bytes
        the pieces add up to, where known (a local disk reserves them before the first).
        """
        pieces = data if callable(data) else (lambda: [data])
        return self._write_whole(key, pieces, expected, size)

    @abc.abstractmethod
    def _write_whole(
        self,
        key: str,
        pieces: Callable[[], Iterable[Piece]],
        expected: Expected | None,
        size: int | None = None,
    ) -> tuple[int, int]:
        """Write `key` whole; with `expected`, only if the object there is as expected
        (FileExistsError if not)."""

    def conditional_writes(self) -> bool:
        """Whether this backend can write an object only if it is absent or unchanged."""
        return False

    def expected(self, key: str) -> Expected | None:
        """The condition a write of `key` can be made under (its version now, or absent),
        looked up now; None where this backend can only write unconditionally."""
        return None

    def write_text(self, key: str, text: str) -> None:
        self.write_object(key, text.encode())

    @abc.abstractmethod
    def create_exclusive(self, key: str, data: bytes) -> None:
        """Create an object that must not exist yet, whole, in one step; FileExistsError if
        it does (another writer was first)."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object this project wrote (nothing happens if it is gone already)."""

    def _temporary_name(self) -> str:
        """A temporary's name: the marker, the writer that writes it, a unique part."""
        owner = self.writer if self.writer is not None else "norun"
        return f"{TMP_MARKER}{owner}-{uuid.uuid4().hex}"

    def remove_stale_temporaries(
        self, *, nested_marker: str | None, keep_writer: str | None = None
    ) -> int:
        """Delete temporaries that killed or lost writers left behind (all but
        `keep_writer`'s); returns how many. A folder holding a `nested_marker` folder is
        another dataset (with writers of its own): not entered. Only backends that write
        through temporaries have any."""
        return 0

    # -- reads ------------------------------------------------------------------------------
    @abc.abstractmethod
    def read(self, key: str, *, small: bool = False) -> bytes:
        """One whole object; FileNotFoundError if it does not exist. `small`: the caller knows
        it to be small, so it is read in one request, its size not looked up first."""

    @abc.abstractmethod
    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object; FileNotFoundError if it does not exist."""

    @abc.abstractmethod
    def read_many(self, keys: Sequence[str], *, small: bool = False) -> dict[str, bytes | None]:
        """Whole objects; None for an object that does not exist. `small` as for `read`."""

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """An object's size in bytes, None if it does not exist."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is at `key`."""

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every object key below `prefix` (recursive), relative to the root."""
        return sorted(self.sizes_below(prefix))

    @abc.abstractmethod
    def sizes_below(self, prefix: str = "") -> dict[str, int]:
        """Every object below `prefix` (recursive) and its size, keyed relative to the root,
        from one listing (temporaries left out)."""

    @abc.abstractmethod
    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        """The objects directly below `prefix` (not recursive) and their sizes, from one
        listing: names relative to `prefix`. Empty if `prefix` does not exist."""

    def is_empty(self) -> bool:
        return self.first_entry() is None

    @abc.abstractmethod
    def first_entry(self) -> str | None:
        """Some object (or, on object stores, folder) below the root, None when there is
        nothing at all: stops at the first one found."""

    @abc.abstractmethod
    def is_file(self) -> bool:
        """The root itself is one file or object (not a directory or prefix)."""

    # -- failure handling -------------------------------------------------------------------
    def _describe(self, key: str) -> str:
        return f"{self.url}/{key}" if key else self.url

    def _accepts_timeout(self) -> bool:
        """Whether a request function takes `timeout=` (an async fsspec filesystem's)."""
        return False

    def _admit(self) -> None:
        """Refuse a request of a halted writer (see `halt`); every backend asks before each."""
        why = halted(self.writer) if self.writer is not None else None
        if why is not None:
            raise StoreError(f"{self.url}: {why}")

    def _retry(self, fn: Callable[..., T], what: str) -> T:
        """`fn()` with retries of transient failures. Until this store has answered once,
        within the deadline (deadlines.py): a request that takes a timeout is given the time
        left (`fn(timeout=...)`), and a store that never answers is one clear error. A halted
        writer's request is refused before each attempt: a retry must not land one."""
        secrets = secret_strings(self.storage_options)

        def admitted(**limit: float) -> T:
            self._admit()
            return fn(**limit)

        if self._answered:
            return call_with_retries(admitted, what, counter=self.requests, secrets=secrets)
        limit = deadlines.timeout()
        deadline = time.monotonic() + limit
        timed = self._accepts_timeout()

        def attempt() -> T:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer yet")
            # fsspec checks its timeout once a second and raises a second after it passes
            return admitted(timeout=max(left - 1.0, 0.01)) if timed else admitted()

        # A refused connection or an unknown host is retried a few times, not for the whole
        # deadline: a store that never answered is more likely misnamed than restarting.
        policy = dataclasses.replace(DEFAULT_POLICY, attempts=FIRST_CONTACT_ATTEMPTS,
                                     total_seconds=limit)  # fmt: skip
        try:
            result = call_with_retries(
                attempt, what, counter=self.requests, secrets=secrets, policy=policy
            )
        except FileNotFoundError:
            self._answered = True  # a store that says "no such object" has answered
            raise
        except GaveUp as exc:
            waited = time.monotonic() > deadline - 2  # else it refused, or is not found
            raise deadlines.unanswered(self.url, self.storage_options, exc.cause, waited) from None
        self._answered = True
        return result
