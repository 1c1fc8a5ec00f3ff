"""A store on an fsspec filesystem: GCS and S3, and any other protocol fsspec knows.

An object is one upload (a single PUT, or multipart / resumable for large shards, streamed
from the spool) that the store makes visible only when complete; an upload that fails midway
is discarded, never completed torn. Creating an object only if absent is the store's own
conditional request (GCS `ifGenerationMatch=0`, S3 `If-None-Match: *`), or, on any other
filesystem, only what it declares with `exclusive_create`. A conditional write (`Expected`,
stores/base.py) is made on the object's version as `expected` looked it up before (S3's
ETag, GCS's generation). Where it was absent, the upload is created only if absent (on GCS
at any size: a resumable upload carries `ifGenerationMatch=0`). Where it existed, an object
smaller than one block (the filesystem's `block_size`: one request) replaces it only if it
is still at that version: s3fs's single PUT with `If-Match: <ETag>`; on GCS our own
single-request (multipart) upload with `ifGenerationMatch=<generation>`, made through
gcsfs's request machinery, since gcsfs sends no generation but 0. A larger replacement is
unconditional: a multipart upload's completion is conditional on AWS, but moto ignores it,
and gcsfs's resumable upload can carry no generation but 0 (neither relied on); so is any
replacement in a zonal GCS bucket, which gcsfs writes over gRPC, its own way. A
precondition that no longer holds (HTTP 412) is FileExistsError. Every request is retried on
transient failures and counted.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

import fsspec
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.spec import AbstractBufferedFile

from shardwright.common import deadlines
from shardwright.errors import StoreError
from shardwright.formats.shardfile import Piece, write_pieces
from shardwright.stores.base import TMP_MARKER, Expected, Store

S3_PROTOCOLS = frozenset({"s3", "s3a"})
GCS_PROTOCOLS = frozenset({"gs", "gcs"})
EXCLUSIVE_PROTOCOLS = S3_PROTOCOLS | GCS_PROTOCOLS  # conditional create on the server


def open_filesystem(url: str, storage_options: dict[str, Any]) -> fsspec.AbstractFileSystem:
    """The filesystem of `url`, with retries left to us and requests under the deadline."""
    options = copy.deepcopy(storage_options)  # botocore edits its config dicts
    if url.startswith("s3://"):
        # Retry in one place (ours: backoff with jitter, bounded, counted), not also inside
        # botocore and s3fs, whose silent retries would hide failures from the manifest. A
        # user's own retry configuration is kept.
        config = dict(options.get("config_kwargs", {}))
        config.setdefault("retries", {"total_max_attempts": 1})
        # An endpoint that accepts no connection, or stops sending, is given up on after the
        # deadline (deadlines.py), however long a transfer runs.
        config.setdefault("connect_timeout", deadlines.timeout())
        config.setdefault("read_timeout", deadlines.timeout())
        options["config_kwargs"] = config
    elif url.startswith(("http://", "https://")):
        options.setdefault("client_kwargs", {}).setdefault("timeout", deadlines.aiohttp_timeout())
    fs, _ = fsspec.core.url_to_fs(url, **options)
    if "s3" in protocols_of(fs) and "retries" not in storage_options.get("config_kwargs", {}):
        fs.retries = 1
    return fs


def protocols_of(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


class FsspecStore(Store):
    """Any URL fsspec opens that no other backend claims (gs://, s3://, http://, ...)."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        writer: str | None = None,
    ):
        super().__init__(url, storage_options, writer)
        self._fs: fsspec.AbstractFileSystem | None = None

    def with_writer(self, writer: str | None) -> Self:
        other = super().with_writer(writer)
        other._fs = self._fs  # made once per store, not per task
        return other

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """The filesystem, made at the first request: a store is rebuilt from its URL in every
        worker it is sent to, and constructing one never waits on the network."""
        if self._fs is None:
            self._fs = open_filesystem(self.url, self.storage_options)
        return self._fs

    @functools.cached_property
    def root(self) -> str:
        """The URL's path as its filesystem names it, read from the URL alone (a chained
        URL's path only its filesystem knows)."""
        if "::" in self.url:
            return str(fsspec.core.url_to_fs(self.url, **self.storage_options)[1]).rstrip("/")
        return str(fsspec.core.strip_protocol(self.url)).rstrip("/")

    def _accepts_timeout(self) -> bool:
        return isinstance(self.filesystem(), AsyncFileSystem)

    # -- writes -----------------------------------------------------------------------------
    def _write_whole(
        self,
        key: str,
        pieces: Callable[[], Iterable[Piece]],
        expected: Expected | None,
        size: int | None = None,
    ) -> tuple[int, int]:
        path = self.path(key)
        absent = expected is not None and expected.version is None
        replaces = expected.version if expected is not None else None  # its ETag / generation

        def upload(**_: float) -> tuple[int, int]:  # an upload's length has no deadline
            fs = self.filesystem()
            out = fs.open(path, "xb" if absent else "wb")
            try:
                written = write_pieces(pieces(), out)
            except BaseException:
                _abandon(out)
                raise
            try:
                if replaces is not None and self._is_s3() and _one_put(out):
                    out.kwargs["IfMatch"] = replaces  # s3fs sends it with its single PUT
                elif replaces is not None and self._is_gcs() and _unsent_gcs_upload(out):
                    _replace_if_generation(fs, path, out, replaces)  # one request, ours
                    return written
                out.close()
            except OSError as exc:
                if isinstance(exc, FileExistsError) or _precondition_failed(exc):
                    raise FileExistsError(f"{path} changed since it was looked up") from None
                raise
            return written

        self.requests.add("puts")
        return self._retry(upload, f"writing {self._describe(key)}")

    def conditional_writes(self) -> bool:
        return bool(EXCLUSIVE_PROTOCOLS & set(protocols_of(self.filesystem())))

    def expected(self, key: str) -> Expected | None:
        """The object's version: S3's ETag, GCS's generation; Expected(None) where it is
        absent, None (unconditional) where neither is given."""
        if not self.conditional_writes():
            return None
        self.requests.add("heads")
        try:
            found = self._retry(
                lambda **limit: self.filesystem().info(self.path(key), **limit),
                f"looking up {self._describe(key)}",
            )
        except FileNotFoundError:
            return Expected(None)
        version = found.get("ETag") if self._is_s3() else found.get("generation")
        return Expected(str(version)) if version else None

    def create_exclusive(self, key: str, data: bytes) -> None:
        """GCS uploads with ifGenerationMatch=0, S3 with If-None-Match; any other filesystem
        only if it declares `exclusive_create` (the benchmarks' sink)."""
        fs = self.filesystem()
        if not getattr(fs, "exclusive_create", False) and not self.conditional_writes():
            raise StoreError(
                f"{self.url}: this store cannot create an object only if it is absent, so no "
                "job can hold a lease on it; use a local path, gs:// or s3://"
            )
        path = self.path(key)
        self.requests.add("puts")
        self._retry(
            lambda **limit: fs.pipe_file(path, data, mode="create", **limit),
            f"creating {self._describe(key)}",
        )

    def delete(self, key: str) -> None:
        self.requests.add("deletes")
        with contextlib.suppress(FileNotFoundError):
            self._retry(
                lambda **limit: self.filesystem().rm_file(self.path(key), **limit),
                f"deleting {self._describe(key)}",
            )

    # -- reads ------------------------------------------------------------------------------
    def read(self, key: str, *, small: bool = False) -> bytes:
        self.requests.add("gets")
        # s3fs sizes an object with a HEAD before reading it whole, to split a large one into
        # concurrent ranges; an object the caller knows is small (a job's control objects,
        # its lease read before every data object) is one GET.
        once = {"max_concurrency": 1} if small and self._is_s3() else {}
        return self._retry(
            lambda **limit: bytes(self.filesystem().cat_file(self.path(key), **once, **limit)),
            f"reading {self._describe(key)}",
        )

    def _is_s3(self) -> bool:
        return bool(S3_PROTOCOLS & set(protocols_of(self.filesystem())))

    def _is_gcs(self) -> bool:
        return bool(GCS_PROTOCOLS & set(protocols_of(self.filesystem())))

    def read_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        path = self.path(key)

        def ranged(**limit: float) -> bytes:
            try:
                return bytes(self.filesystem().cat_file(path, start=start, end=end, **limit))
            except OSError as exc:
                if not _past_the_end(exc):
                    raise
                return b""  # as a file read past its end is, on every backend

        self.requests.add("gets")
        return self._retry(ranged, f"reading bytes {start}-{end} of {self._describe(key)}")

    def read_many(self, keys: Sequence[str], *, small: bool = False) -> dict[str, bytes | None]:
        """Fetched concurrently (one batch `cat` of gcsfs or s3fs). A fetch that fails in the
        batch is counted as a retry and made again alone, with the usual retries. `small`:
        each is one GET (no HEAD first; an absent one is then not looked for as a folder)."""
        out: dict[str, bytes | None] = {}
        if keys and not self._answered:  # a first request is made alone, under the deadline
            out[keys[0]] = self._read_or_none(keys[0], small)
            keys = keys[1:]
        if not keys:
            return out
        self.requests.add("gets", len(keys))
        paths = {self.path(key): key for key in keys}
        try:  # `cat` keys its answer by the paths given, already stripped of the protocol
            once = {"max_concurrency": 1} if small and self._is_s3() else {}
            fetched = self.filesystem().cat(list(paths), on_error="return", **once)
        except Exception:  # the batch call itself failed: fetch each below, with retries
            fetched = {}
        for path, key in paths.items():
            value = fetched.get(path)
            if isinstance(value, bytes | bytearray):
                out[key] = bytes(value)
            elif isinstance(value, FileNotFoundError):
                out[key] = None
            else:
                self.requests.add("retries")
                out[key] = self._read_or_none(key, small)
        return out

    def _read_or_none(self, key: str, small: bool = False) -> bytes | None:
        try:
            return self.read(key, small=small)
        except FileNotFoundError:
            return None

    def size(self, key: str) -> int | None:
        self.requests.add("heads")
        try:
            return int(
                self._retry(
                    lambda **limit: self.filesystem().size(self.path(key), **limit),
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
                lambda **limit: self.filesystem().info(self.path(key), **limit),
                f"looking up {self._describe(key)}",
            )
        except FileNotFoundError:
            return False
        return True

    def sizes_below(self, prefix: str = "") -> dict[str, int]:
        base = self.path(prefix).rstrip("/")
        if not self.exists(prefix.rstrip("/")):
            return {}
        root = self.root + "/"
        self.requests.add("lists")
        found = self._retry(
            lambda **limit: self.filesystem().find(base, detail=True, **limit),
            f"listing {self._describe(prefix)}",
        )
        return {
            (p[len(root) :] if p.startswith(root) else p): int(info.get("size") or 0)
            for p, info in found.items()
            if TMP_MARKER not in p
        }

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        base = self.path(prefix).rstrip("/")
        self.requests.add("lists")
        try:
            entries = self._retry(
                lambda **limit: self.filesystem().ls(base, detail=True, **limit),
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

    def first_entry(self) -> str | None:
        self.requests.add("lists")
        try:
            entries = self._retry(
                lambda **limit: self.filesystem().ls(self.root, **limit), f"listing {self.url}"
            )
        except FileNotFoundError:
            return None
        if not entries:
            return None
        return str(entries[0]).rstrip("/").rsplit("/", 1)[-1]

    def is_file(self) -> bool:
        self.requests.add("heads")
        try:  # `info`, not fsspec's `isfile`, which answers False to every error
            found = self._retry(
                lambda **limit: self.filesystem().info(self.root, **limit),
                f"looking up {self.url}",
            )
        except FileNotFoundError:
            return False
        return found.get("type") == "file"


def _past_the_end(exc: OSError) -> bool:
    """S3 answers a range that starts at or past an object's end with 416 (not satisfiable),
    where a file read gives the bytes there are: none. A missing object is a 404 first."""
    status = getattr(exc, "code", None) or getattr(exc, "status", None)
    return not isinstance(exc, FileNotFoundError) and (
        status == 416 or "not satisfiable" in str(exc).lower()
    )


def _one_put(out: Any) -> bool:
    """An s3fs upload that its close sends as one PUT (no multipart upload begun)."""
    return (
        getattr(out, "mpu", None) is None
        and isinstance(getattr(out, "kwargs", None), dict)
        and out.tell() < out.blocksize
    )


def _unsent_gcs_upload(out: Any) -> bool:
    """A gcsfs file of the JSON API (not a zonal bucket's) that has sent nothing yet: its
    bytes all fit in its buffer, less than one block, so no resumable upload was begun."""
    from gcsfs.core import GCSFile  # imported already: the filesystem is gcsfs's

    return type(out) is GCSFile and out.offset is None


def _replace_if_generation(fs: Any, path: str, out: Any, generation: str) -> None:
    """Upload the bytes `out` holds to `path` in one request, only if the object there is
    still at `generation` (FileExistsError if not); `out` is closed having sent nothing."""
    data = out.buffer.getvalue()
    out.closed = True  # its bytes go up in our request, or nowhere
    bucket, key, _ = fs.split_path(path)
    try:
        sync(fs.loop, _upload_if_generation, fs, bucket, key, data, out.content_type, generation)
    finally:
        fs.invalidate_cache(path)  # as a closed file does: listings of its folders are stale


async def _upload_if_generation(
    fs: Any, bucket: str, key: str, data: bytes, content_type: str, generation: str
) -> dict[str, Any]:
    """A single-request (multipart) upload to the JSON API with `ifGenerationMatch`, through
    gcsfs's own request machinery (its session, credentials, retries of transient failures;
    HTTP 412, a precondition that no longer holds, raised as FileExistsError). gcsfs's own
    single-request upload sends no generation but 0."""
    boundary = f"shardwright-{uuid.uuid4().hex}"  # never found in the bytes it bounds
    head = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
        f"{json.dumps({'name': key})}\r\n"
        f"--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
    )
    body = b"".join((head.encode(), data, f"\r\n--{boundary}--\r\n".encode()))
    quoted = urllib.parse.quote(bucket, safe="")
    try:
        found: dict[str, Any] = await fs._call(
            "POST",
            f"{fs._location}/upload/storage/v1/b/{quoted}/o",
            uploadType="multipart",
            ifGenerationMatch=generation,
            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
            data=body,
            json_out=True,
        )
    except Exception as exc:
        if isinstance(exc, FileExistsError) or getattr(exc, "code", None) == 412:  # gcsfs's 412
            raise FileExistsError(f"{bucket}/{key}: no longer at generation {generation}") from None
        raise
    return found


def _precondition_failed(exc: OSError) -> bool:
    """S3's 412 answer to an If-Match that no longer holds (s3fs raises EINVAL for it)."""
    said = str(exc).lower().replace("-", "")  # "At least one of the pre-conditions ..."
    return "precondition" in said or getattr(exc, "status", None) == 412


def _abandon(out: Any) -> None:
    """Drop an upload whose pieces failed midway, so that closing it never completes a torn
    object (gcsfs and s3fs cancel the resumable or multipart upload; a small one was only
    buffered). A file of another kind is closed, as a `with` block would."""
    if not isinstance(out, AbstractBufferedFile):
        out.close()
        return
    with contextlib.suppress(Exception):
        out.discard()
    out.closed = True
