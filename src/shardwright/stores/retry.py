"""Retries for object-store requests: exponential backoff with full jitter, bounded in total.

Transient failures (HTTP 408/429/5xx, connection resets, timeouts) are retried; permanent ones
(missing bucket or object, access denied, bad request) fail at once with a message that names
the object and the cause, and never the credentials.
"""

from __future__ import annotations

import errno
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from shardwright.errors import StoreError

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TRANSIENT_ERRNOS = frozenset(
    {errno.EBUSY, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE}
)
_TRANSIENT_TEXT = re.compile(
    r"\b(408|429|500|502|503|504)\b|SlowDown|ServiceUnavailable|InternalError|RequestTimeout|"
    r"timed? ?out|Connection (reset|aborted|refused)|Server ?disconnected|"
    r"reset by peer|Broken pipe|IncompleteRead|Payload",
    re.IGNORECASE,
)


class GaveUp(StoreError):
    """Transient failures that went on past the retry budget; `cause` is the last one."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 10
    base_delay: float = 0.05
    max_delay: float = 4.0
    total_seconds: float = 120.0


DEFAULT_POLICY = RetryPolicy()


class RequestCounter(threading.local):
    """Per-thread request and retry counts, so a task can report its own."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """What this thread counted after `before` was taken (non-zero kinds only)."""
        return {k: v - before.get(k, 0) for k, v in self.counts.items() if v != before.get(k, 0)}


def is_transient(exc: BaseException) -> bool:
    if isinstance(
        exc,
        FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError | StoreError,
    ):
        return False
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True  # s3fs reports SlowDown / 503 as EBUSY
    package = type(exc).__module__.split(".")[0]
    if package in ("aiohttp", "urllib3", "requests"):
        return True
    if package == "botocore" and re.search(r"Connection|Timeout", type(exc).__name__):
        return True
    status = getattr(exc, "code", None) or getattr(exc, "status", None)
    if isinstance(status, int) and 100 <= status < 600:
        return status in TRANSIENT_STATUS
    return bool(_TRANSIENT_TEXT.search(str(exc)))


_DENIED_TEXT = re.compile(r"^Forbidden\b|AccessDenied|Access denied|\b40[13]\b", re.IGNORECASE)


def is_access_denied(exc: BaseException) -> bool:
    """403/401 as each client reports it: s3fs a PermissionError, gcsfs an OSError whose text
    starts with "Forbidden", others an HTTP status attribute."""
    if isinstance(exc, PermissionError):
        return True
    status = getattr(exc, "code", None) or getattr(exc, "status", None)
    if isinstance(status, int):
        return status in (401, 403)
    return isinstance(exc, OSError) and bool(_DENIED_TEXT.search(str(exc)))


def secret_strings(options: Any) -> list[str]:
    """The strings of storage options that must never appear in a message (endpoints are
    URLs a user needs to see)."""
    if isinstance(options, dict):
        return [s for value in options.values() for s in secret_strings(value)]
    if isinstance(options, str) and not options.startswith(("http://", "https://")):
        return [options]
    return []


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def call_with_retries(
    fn: Callable[[], T],
    what: str,
    *,
    counter: RequestCounter | None = None,
    secrets: Iterable[str] = (),
    policy: RetryPolicy = DEFAULT_POLICY,
) -> T:
    """Run `fn`, retrying transient failures; permanent ones become one clear StoreError."""
    started = time.monotonic()
    secrets = tuple(secrets)
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            cause = redact(f"{type(exc).__name__}: {exc}", secrets)
            if isinstance(exc, FileNotFoundError):
                raise FileNotFoundError(f"{what}: not found ({cause})") from None
            if isinstance(exc, FileExistsError):  # an exclusive create lost to another writer
                raise FileExistsError(f"{what}: already exists ({cause})") from None
            if not is_transient(exc):
                if is_access_denied(exc):
                    raise StoreError(
                        f"{what}: access denied; check the credentials and the "
                        f"bucket's permissions ({cause})"
                    ) from None
                raise StoreError(f"{what}: {cause}") from None
            delay = random.uniform(0, min(policy.max_delay, policy.base_delay * 2**attempt))
            if attempt + 1 == policy.attempts or (
                time.monotonic() - started + delay > policy.total_seconds
            ):
                raise GaveUp(
                    f"{what}: gave up after {attempt + 1} attempts ({cause})", cause
                ) from None
            if counter is not None:
                counter.add("retries")
            time.sleep(delay)
    raise AssertionError("unreachable")
