"""Whole-object writes and ranged reads on a destination: local disk, memory://, gs://, s3://.

Every object is written once and whole (ARCHITECTURE invariant 1). On local disk an object is
written under a temporary name in its own directory and renamed into place, so a killed job
never leaves a torn object at a shard's key; object stores make an upload (single PUT, or
multipart / resumable for large shards, streamed from the spool) visible only when complete.
Requests to object stores are retried on transient failures and counted per thread.

A store that a job's run writes through carries that run (`JobRun`): before each data object
it checks that the destination's lease still names the run (lifecycle/lease.py), so a job that
lost its lease stops writing, and its temporaries carry its run id.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import fsspec
from fsspec.asyn import AsyncFileSystem

from shardwright import deadlines
from shardwright.errors import LeaseLost, StoreError
from shardwright.formats.shardfile import Piece, write_pieces
from shardwright.retry import (
    DEFAULT_POLICY,
    GaveUp,
    RequestCounter,
    call_with_retries,
    secret_strings,
)

FIRST_CONTACT_ATTEMPTS = 4  # tries of a store's first request, within the deadline
CONTROL_PREFIX = ".shardwright/"  # a job's own objects in its destination (lifecycle/)
TMP_MARKER = ".shardwright-tmp-"
CREATING_MARKER = ".shardwright-creating-"  # an exclusive creation's content, linked into place
T = TypeVar("T")
_MEMORY_CREATE = threading.Lock()  # memory:// is one process: a lock makes creation exclusive

__all__ = ["CONTROL_PREFIX", "JobRun", "LeaseLost", "Store", "StoreError"]


@dataclass(frozen=True)
class JobRun:
    """One run of a job writing a destination: `job` is the job's fingerprint digest (what
    its receipts name), `run` this attempt's id, `lease` the key of the lease it holds."""

    job: str
    run: str
    lease: str


class Store:
    """A dataset root: keys are '/'-separated paths below it."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        run: JobRun | None = None,
    ):
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.run = run
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None
        self._answered = False  # has the store answered a request yet (deadlines.py)
        self.requests = RequestCounter()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its URL, options and run: a worker opens its own filesystem and counts
        its own requests."""
        return (type(self), (self.url, self.storage_options, self.run))

    def with_run(self, run: JobRun | None) -> Store:
        """The same destination, written by `run` (fenced by its lease); its requests are
        counted with this store's."""
        other = Store(self.url, self.storage_options, run)
        other.requests = self.requests
        other._fs, other._root = self._fs, self._root  # resolved once per store, not per task
        other._answered = self._answered
        return other

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            options = copy.deepcopy(self.storage_options)  # botocore edits its config dicts
            if self.url.startswith("s3://"):
                # Retry in one place (ours: backoff with jitter, bounded, counted), not also
                # inside botocore and s3fs, whose silent retries would hide failures from the
                # manifest. A user's own retry configuration is kept.
                config = dict(options.get("config_kwargs", {}))
                config.setdefault("retries", {"total_max_attempts": 1})
                # An endpoint that accepts no connection, or stops sending, is given up on
                # after the deadline (deadlines.py), however long a transfer runs.
                config.setdefault("connect_timeout", deadlines.timeout())
                config.setdefault("read_timeout", deadlines.timeout())
                options["config_kwargs"] = config
            elif self.url.startswith(("http://", "https://")):
                options.setdefault("client_kwargs", {}).setdefault(
                    "timeout", deadlines.aiohttp_timeout()
                )
            self._fs, self._root = fsspec.core.url_to_fs(self.url, **options)
            if "s3" in _protocols(self._fs) and "retries" not in self.storage_options.get(
                "config_kwargs", {}
            ):
                self._fs.retries = 1
        return self._fs

    @property
    def root(self) -> str:
        self.fs  # noqa: B018 - resolves the root as a side effect
        assert self._root is not None
        return self._root.rstrip("/")

    @property
    def is_local(self) -> bool:
        return "file" in _protocols(self.fs)

    @property
    def is_process_local(self) -> bool:
        """memory:// lives in one process: other Dask worker processes cannot see it."""
        return "memory" in _protocols(self.fs)

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    # -- writes -----------------------------------------------------------------------------
    def write_object(
        self, key: str, data: bytes | bytearray | memoryview | Callable[[], Iterable[Piece]]
    ) -> tuple[int, int]:
        """Write one whole object; returns (size, crc32c). Never leaves a partial object at key.

        `data` is the bytes, or a function returning the pieces in order (called again if an
        upload must be retried, so a spooled shard is streamed, never held whole in memory).
        """
        pieces = data if callable(data) else (lambda: [data])
        path = self.path(key)
        if self.run is not None and not key.startswith(CONTROL_PREFIX):
            self.check_lease()
        if self.is_local:
            tmp = os.path.join(os.path.dirname(path), self._temporary_name())
            try:
                with _create_local(tmp) as out:
                    written = write_pieces(pieces(), out)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return written

        def upload(**_: float) -> tuple[int, int]:  # an upload's length has no deadline
            with self.fs.open(path, "wb") as out:
                return write_pieces(pieces(), out)

        self.requests.add("puts")
        return self._retry(upload, f"writing {self._describe(key)}")

    def write_text(self, key: str, text: str) -> None:
        self.write_object(key, text.encode())

    def create_exclusive(self, key: str, data: bytes) -> None:
        """Create an object that must not exist yet, whole, in one step; FileExistsError if
        it does (another writer was first). Local disk links a complete temporary into place
        (link never replaces), GCS uploads with ifGenerationMatch=0, S3 with If-None-Match; any
        other filesystem only if it declares `exclusive_create` (the benchmarks' sink)."""
        path = self.path(key)
        if self.is_local:
            # Not a run's temporary: no job's cleanup may remove it while it is linked.
            tmp = os.path.join(os.path.dirname(path), f"{CREATING_MARKER}{uuid.uuid4().hex}")
            with _create_local(tmp) as out:
                out.write(data)
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
            return
        if self.is_process_local:
            with _MEMORY_CREATE:
                if self.fs.exists(path):
                    raise FileExistsError(path)
                self.fs.pipe_file(path, data)
            return
        exclusive = getattr(self.fs, "exclusive_create", False)
        if not exclusive and not {"s3", "s3a", "gs", "gcs"} & set(_protocols(self.fs)):
            raise StoreError(
                f"{self.url}: this store cannot create an object only if it is absent, so no "
                "job can hold a lease on it; use a local path, gs:// or s3://"
            )
        self.requests.add("puts")
        self._retry(
            lambda **limit: self.fs.pipe_file(path, data, mode="create", **limit),
            f"creating {self._describe(key)}",
        )

    def delete(self, key: str) -> None:
        """Remove one object this project wrote (nothing happens if it is gone already); on
        local disk, also the folders that removal left empty, up to the root."""
        if self.is_local:
            path = self.path(key)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            directory = os.path.dirname(path)
            while len(directory) > len(self.root) and directory.startswith(self.root + os.sep):
                try:
                    os.rmdir(directory)  # only ever an empty folder
                except OSError:
                    break
                directory = os.path.dirname(directory)
            return
        self.requests.add("deletes")
        with contextlib.suppress(FileNotFoundError):
            self._retry(
                lambda **limit: self.fs.rm_file(self.path(key), **limit),
                f"deleting {self._describe(key)}",
            )

    def check_lease(self) -> None:
        """Raise LeaseLost unless the destination's lease still names this store's run."""
        assert self.run is not None
        try:
            holder = json.loads(self.read(self.run.lease))
        except (FileNotFoundError, ValueError):
            holder = None
        if not isinstance(holder, dict) or holder.get("run") != self.run.run:
            raise LeaseLost(
                f"{self.url}: this job no longer holds the destination's lease "
                f"({self.run.lease}); another job took it over, so this one stops writing"
            )

    def _temporary_name(self) -> str:
        """A temporary's name: the marker, the run that writes it, a unique part."""
        owner = self.run.run if self.run is not None else "norun"
        return f"{TMP_MARKER}{owner}-{uuid.uuid4().hex}"

    # -- reads ------------------------------------------------------------------------------
    def read(self, key: str) -> bytes:
        self.requests.add("gets")
        return self._retry(
            lambda **limit: bytes(self.fs.cat_file(self.path(key), **limit)),
            f"reading {self._describe(key)}",
        )

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object; FileNotFoundError if it does not exist."""
        if end <= start:
            return b""
        self.requests.add("gets")
        return self._retry(
            lambda **limit: bytes(self.fs.cat_file(self.path(key), start=start, end=end, **limit)),
            f"reading bytes {start}-{end} of {self._describe(key)}",
        )

    def read_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        """Whole objects, fetched concurrently on object stores (one batch `cat` of gcsfs or
        s3fs); None for an object that does not exist. A fetch that fails in the batch is
        counted as a retry and made again alone, with the usual retries."""
        out: dict[str, bytes | None] = {}
        if self.is_local:  # plain reads: fsspec's per-call overhead dwarfs small objects
            self.requests.add("gets", len(keys))
            return {key: _read_local_file(self.path(key)) for key in keys}
        if keys and not self._answered:  # a first request is made alone, under the deadline
            try:
                out[keys[0]] = self.read(keys[0])
            except FileNotFoundError:
                out[keys[0]] = None
            keys = keys[1:]
        if not keys:
            return out
        self.requests.add("gets", len(keys))
        paths = {self.path(key): key for key in keys}
        try:
            fetched = self.fs.cat(list(paths), on_error="return")
        except Exception:  # the batch call itself failed: fetch each below, with retries
            fetched = {}
        for path, key in paths.items():
            value = fetched.get(self.fs._strip_protocol(path), fetched.get(path))
            if isinstance(value, bytes | bytearray):
                out[key] = bytes(value)
            elif isinstance(value, FileNotFoundError):
                out[key] = None
            else:
                self.requests.add("retries")
                try:
                    out[key] = self.read(key)
                except FileNotFoundError:
                    out[key] = None
        return out

    def size(self, key: str) -> int | None:
        self.requests.add("heads")
        try:
            return int(
                self._retry(
                    lambda **limit: self.fs.size(self.path(key), **limit),
                    f"sizing {self._describe(key)}",
                )
            )
        except FileNotFoundError:
            return None

    def exists(self, key: str) -> bool:
        """Existence through `info`, retried: fsspec's `exists` turns every error into False,
        which under a transient failure would make a full destination look empty."""
        self.requests.add("heads")
        try:
            self._retry(
                lambda **limit: self.fs.info(self.path(key), **limit),
                f"looking up {self._describe(key)}",
            )
        except FileNotFoundError:
            return False
        return True

    # -- failure handling -------------------------------------------------------------------
    def _describe(self, key: str) -> str:
        return f"{self.url}/{key}" if key else self.url

    def _retry(self, fn: Callable[..., T], what: str) -> T:
        """`fn()` with retries of transient failures. Until this store has answered once,
        within the deadline (deadlines.py): an async filesystem's request is given the time
        left (`fn(timeout=...)`), and a store that never answers is one clear error."""
        if self.is_local:
            return fn()
        secrets = secret_strings(self.storage_options)
        if self._answered:
            return call_with_retries(fn, what, counter=self.requests, secrets=secrets)
        limit = deadlines.timeout()
        deadline = time.monotonic() + limit
        timed = isinstance(self.fs, AsyncFileSystem)

        def attempt() -> T:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer yet")
            # fsspec checks its timeout once a second and raises a second after it passes
            return fn(timeout=max(left - 1.0, 0.01)) if timed else fn()

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
            message = deadlines.unanswered(self.url, self.storage_options, exc.cause, waited)
            raise StoreError(message) from None
        self._answered = True
        return result

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every object key below `prefix` (recursive), relative to the root."""
        return sorted(self.sizes_below(prefix))

    def sizes_below(self, prefix: str = "") -> dict[str, int]:
        """Every object below `prefix` (recursive) and its size, keyed relative to the root,
        from one listing (temporaries left out)."""
        base = self.path(prefix).rstrip("/")
        if not self.exists(prefix.rstrip("/")):
            return {}
        root = self.root + "/"
        self.requests.add("lists")
        found = self._retry(
            lambda **limit: self.fs.find(base, detail=True, **limit),
            f"listing {self._describe(prefix)}",
        )
        return {
            (p[len(root) :] if p.startswith(root) else p): int(info.get("size") or 0)
            for p, info in found.items()
            if TMP_MARKER not in p
        }

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        """The objects directly below `prefix` (not recursive) and their sizes, from one
        listing: names relative to `prefix`. Empty if `prefix` does not exist."""
        base = self.path(prefix).rstrip("/")
        self.requests.add("lists")
        try:
            entries = self._retry(
                lambda **limit: self.fs.ls(base, detail=True, **limit),
                f"listing {self._describe(prefix)}",
            )
        except (FileNotFoundError, NotADirectoryError):
            return {}
        out = {}
        for entry in entries:
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            if entry.get("type") == "file" and TMP_MARKER not in name:
                out[name] = int(entry.get("size") or 0)
        return out

    def is_empty(self) -> bool:
        return self.first_entry() is None

    def first_entry(self) -> str | None:
        """Some object (or, on object stores, folder) below the root, None when there is
        nothing at all: stops at the first one found."""
        if self.is_local:
            if not os.path.isdir(self.root):
                return self.root if os.path.lexists(self.root) else None
            for directory, _, files in os.walk(self.root):
                if files:
                    return os.path.relpath(os.path.join(directory, files[0]), self.root)
            return None
        self.requests.add("lists")
        try:
            entries = self._retry(
                lambda **limit: self.fs.ls(self.root, **limit), f"listing {self.url}"
            )
        except FileNotFoundError:
            return None
        if not entries:
            return None
        return str(entries[0]).rstrip("/").rsplit("/", 1)[-1]

    def is_file(self) -> bool:
        """The root itself is one file or object (not a directory or prefix)."""
        if self.is_local:
            return os.path.isfile(self.root)
        self.requests.add("heads")
        try:  # `info`, not fsspec's `isfile`, which answers False to every error
            found = self._retry(
                lambda **limit: self.fs.info(self.root, **limit), f"looking up {self.url}"
            )
        except FileNotFoundError:
            return False
        return found.get("type") == "file"

    def remove_stale_temporaries(self, keep_run: str | None = None) -> int:
        """Delete temporary files that killed or lost runs left behind (all but `keep_run`'s);
        returns how many. Only the lease holder calls it: every other run writing this dataset
        is dead. Datasets nested inside (a volume's meshes) have their own jobs: not entered."""
        if not self.is_local or not os.path.isdir(self.root):
            return 0
        keep = f"{TMP_MARKER}{keep_run}-" if keep_run else None
        control = CONTROL_PREFIX.rstrip("/")
        removed = 0
        for directory, folders, files in os.walk(self.root):
            folders[:] = [
                f
                for f in folders
                if not os.path.isdir(os.path.join(directory, f, control)) or f == control
            ]
            for name in files:
                if name.startswith(TMP_MARKER) and not (keep and name.startswith(keep)):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except FileNotFoundError:  # its own run finished or removed it meanwhile
                        continue
                    removed += 1
        return removed


def _create_local(path: str) -> Any:
    """A new local file opened for writing, its folder made first. Another job's release may
    remove the folder once it is empty, between the two steps: then it is made again."""
    for _ in range(10):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            return open(path, "xb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            continue
    return open(path, "xb")  # noqa: SIM115


def _read_local_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
