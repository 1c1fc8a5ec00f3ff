"""Every outside call has a deadline (ARCHITECTURE invariant 11): a store that does not
answer is reported `--timeout` seconds (default 25) after it was first asked, never waited on
in silence.

One number, per process, taken from $SHARDWRIGHT_TIMEOUT (which worker processes a job starts
inherit) and set from the options: how long an endpoint may take to accept a connection or
to send the next bytes of an answer, and how long a store that has not answered yet (the
first contact: a plan's metadata reads, a destination's checks) is retried before the command
gives up with one error naming the URL, the endpoint and where credentials came from. Once a
store has answered, a hiccup is retried for longer (`stores/retry.py`'s budget).
"""

from __future__ import annotations

import os
from typing import Any

from shardwright.common.urls import scheme_of
from shardwright.errors import NAMED, OptionError, StoreError

DEFAULT_TIMEOUT = 25.0  # with a command's start, an unreachable store is reported within 30 s
ENV = "SHARDWRIGHT_TIMEOUT"


def timeout() -> float:
    try:
        value = float(os.environ.get(ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value > 0 else DEFAULT_TIMEOUT


def set_timeout(seconds: float) -> None:
    """This process's deadline (and that of the worker processes it starts)."""
    if not seconds > 0:
        raise OptionError(f"timeout must be a positive number of seconds, got {seconds}")
    os.environ[ENV] = repr(float(seconds))
    _curl_environment(seconds, override=True)


def configure_tensorstore() -> None:
    """curl's connect and stall timeouts, for TensorStore, which reads them once, at its
    first request in a process."""
    _curl_environment(timeout(), override=False)


def _curl_environment(seconds: float, override: bool) -> None:
    values = {
        "TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS": str(max(1, round(seconds))),
        "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS": str(max(1, round(seconds))),
        "TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES": "1",
    }
    for name, value in values.items():
        if override:
            os.environ[name] = value
        else:
            os.environ.setdefault(name, value)


def aiohttp_timeout() -> Any:
    """An HTTP client's timeouts: to connect and between bytes, not for a whole transfer."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=timeout(), sock_read=timeout())


def tensorstore_retries() -> dict[str, Any]:
    """TensorStore's retries of one request: a few, quickly (its default waits minutes)."""
    return {"max_retries": 3, "initial_delay": "0.2s", "max_delay": "2s"}


def unanswered(
    url: str, storage_options: dict[str, Any] | None, cause: str = "", waited: bool = True
) -> StoreError:
    """The error of a store that did not answer (`waited`: in the time allowed; else it
    refused or could not be found): the URL, the endpoint, where the credentials came from
    (never a secret) and the option that waits longer."""
    endpoint = describe_endpoint(url, storage_options)
    if waited:
        return StoreError(
            f"{url}: no answer within {timeout():g} s; {endpoint}. Check the URL, the endpoint "
            "and the network, or wait longer with {timeout} SECONDS",
            timeout=NAMED,
        )
    return StoreError(
        f"{url}: cannot be reached ({cause}); {endpoint}. Check the URL, the endpoint and the "
        "network"
    )


def describe_endpoint(url: str, storage_options: dict[str, Any] | None) -> str:
    """Which endpoint a URL is asked at and where its credentials come from, in words."""
    options = storage_options or {}
    endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
        "endpoint_url"
    )
    scheme = scheme_of(url)
    if scheme == "s3":
        where = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or "AWS S3"
        if options.get("key") or options.get("secret"):
            credentials = "the storage options' key"
        elif options.get("anon"):
            credentials = "none (anonymous)"
        elif os.environ.get("AWS_ACCESS_KEY_ID"):
            credentials = "AWS_ACCESS_KEY_ID in the environment"
        elif os.environ.get("AWS_PROFILE"):
            credentials = f"the AWS profile {os.environ['AWS_PROFILE']!r}"
        else:
            credentials = "the default AWS chain (config files, instance role, IRSA)"
        return f"endpoint {where}, credentials from {credentials}"
    if scheme in ("gs", "gcs"):
        where = endpoint or os.environ.get("TENSORSTORE_GCS_HTTP_URL") or "Google Cloud Storage"
        if options.get("token"):
            credentials = "the storage options' token"
        elif os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            credentials = "GOOGLE_APPLICATION_CREDENTIALS"
        else:
            credentials = "the default Google chain (gcloud, workload identity)"
        return f"endpoint {where}, credentials from {credentials}"
    if scheme in ("http", "https"):
        host = url.split("://", 1)[1].split("/", 1)[0]
        return f"endpoint {scheme}://{host}, no credentials"
    return "a local path"


def tensorstore_cause(exc: BaseException) -> str:
    """TensorStore's error without the source-location lines it appends."""
    lines = [line for line in str(exc).splitlines() if "[source locations=" not in line]
    return " ".join(line.strip() for line in lines).strip()
