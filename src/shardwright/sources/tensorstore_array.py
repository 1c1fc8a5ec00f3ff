"""Arrays TensorStore opens (zarr v2/v3, N5, any spec) on local disk, GCS, S3 or HTTP(S).

Shared by the zarr, N5 and spec sources: the kvstore spec built from a URL, small JSON
metadata reads, and the picklable TensorStore-backed source. Every TensorStore request has
a deadline (common/deadlines.py): bounded retries in the context, curl's connect and stall timeouts
in the environment, and a wait bound on the metadata reads that first reach a store.

A chunk these formats do not store is the fill value by their own rule; where a read is
counted (missing.py) the chunks that came back all fill value are looked up, and those not
stored are counted, so a job can say how much of its output is fill it never read.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from typing import Any
from urllib.parse import urlparse

import numpy as np

from shardwright.common import deadlines
from shardwright.common.urls import scheme_of
from shardwright.errors import SourceError
from shardwright.sources import missing
from shardwright.sources.base import ArraySource, SourceHints, axes_from_names

deadlines.configure_tensorstore()  # before the first request of this process
import tensorstore as ts  # noqa: E402 - curl reads its timeouts from the environment once

INLINE_SPEC = "tensorstore:"  # the url of a source given as spec text: tensorstore:<driver>
# The metadata object of an array, by TensorStore driver: what identifies it.
METADATA_KEYS = {"zarr3": "zarr.json", "zarr": ".zarray", "n5": "attributes.json"}


def endpoint_url(storage_options: dict[str, Any] | None) -> str | None:
    """A custom endpoint (MinIO, Ceph, an emulator) given fsspec-style."""
    options = storage_options or {}
    return options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")


def kvstore_spec(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """TensorStore kvstore spec for a local path, file://, gs://, s3:// or http(s):// directory.

    Credentials come from the standard chains (environment, profiles, workload identity /
    IRSA; on S3 the environment alone where it holds a key, as the chain would pick it: the
    chain's profile provider logs an error for each profile file absent); a custom endpoint
    from the fsspec-style storage options. TensorStore's GCS driver takes its endpoint only
    from $TENSORSTORE_GCS_HTTP_URL, which is set for it here.
    """
    scheme = scheme_of(url)
    endpoint = endpoint_url(storage_options)
    if scheme in ("", "file"):  # a local folder may be named `run#2` or `what?`
        local = url[len("file://") :] if scheme == "file" else url
        return {"driver": "file", "path": os.path.abspath(local) + "/"}
    parsed = urlparse(url)
    path = parsed.path.strip("/") + "/"
    if scheme in ("gs", "gcs"):
        if endpoint:
            os.environ["TENSORSTORE_GCS_HTTP_URL"] = endpoint
        return {"driver": "gcs", "bucket": parsed.netloc, "path": path}
    if scheme == "s3":
        spec: dict[str, Any] = {"driver": "s3", "bucket": parsed.netloc, "path": path}
        if endpoint:
            spec["endpoint"] = endpoint
        region = (storage_options or {}).get("client_kwargs", {}).get("region_name")
        if region or endpoint:
            spec["aws_region"] = region or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        if os.environ.get("AWS_ACCESS_KEY_ID"):  # the chain's first link: the profile
            spec["aws_credentials"] = {"type": "environment"}  # files it skips log errors
        return spec
    if scheme in ("http", "https"):
        return {"driver": "http", "base_url": f"{scheme}://{parsed.netloc}", "path": path}
    raise SourceError(f"{url}: unsupported URL scheme {scheme}://")


def context() -> Any:
    """A TensorStore context without a chunk cache (each box is read once) whose requests to
    object stores give up after a few bounded retries."""
    retries = deadlines.tensorstore_retries()
    return ts.Context(
        {
            "cache_pool": {"total_bytes_limit": 0},
            "s3_request_retries": retries,
            "gcs_request_retries": retries,
            "http_request_retries": retries,
        }
    )


class TensorStoreSource(ArraySource):
    """Any array TensorStore opens; the spec is kept (not the handle) for pickling."""

    def __init__(
        self,
        url: str,
        spec: dict[str, Any],
        axes: str | None,
        hints: SourceHints | None = None,
        storage_options: dict[str, Any] | None = None,
        detected_axes: str | None = None,
    ):
        self.spec = spec
        kvstore = spec.get("kvstore")
        driver = kvstore.get("driver") if isinstance(kvstore, dict) else None
        # Kept for worker processes: TensorStore reads a GCS endpoint from the environment.
        self._gcs_endpoint = endpoint_url(storage_options) if driver == "gcs" else None
        self._store: Any = None
        self.origin: tuple[int, ...] = ()  # the domain's first index per native axis
        try:
            store = self._open()
        except ValueError as exc:
            raise SourceError(f"{url}: cannot open ({_open_failure(exc)})") from exc
        super().__init__(
            url,
            tuple(store.shape),
            store.dtype.numpy_dtype,
            axes,
            hints,
            detected_axes=detected_axes or axes_from_names(store.domain.labels),
        )
        # x-fastest storage (N5, x,y,z arrays) reads straight into an F-order block, so the
        # [x, y, z, c] result is F-contiguous like the transpose of a C-order z,y,x read.
        self._order = "F" if self.axes in ("xyz", "xyzc") else "C"
        self._chunks = _stored_chunks(store)
        fill = store.fill_value
        self.fill_value = np.zeros((), self.dtype) if fill is None else np.asarray(fill, self.dtype)

    def _open(self) -> Any:
        """The array, its domain moved to start at 0 (a spec may translate it: `origin`)."""
        if self._store is None:
            if self._gcs_endpoint:
                os.environ["TENSORSTORE_GCS_HTTP_URL"] = self._gcs_endpoint
            store = ts.open(self.spec, read=True, context=context()).result()
            self.origin = tuple(int(i) for i in store.domain.inclusive_min)
            self._store = store[ts.d[:].translate_to[0]] if any(self.origin) else store
        return self._store

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        block = np.asarray(self._open()[slices].read(order=self._order).result())
        if missing.is_counting():
            self._count_absent(slices, block)
        return block

    def _count_absent(self, slices: tuple[slice, ...], block: np.ndarray) -> None:
        """Count the stored chunks the box overlaps and, of those that came back all fill
        value, the ones the store does not have (looked up together, concurrently)."""
        if self._chunks is None:
            return
        shape, key_of = self._chunks
        bounds = [range(n)[s] for n, s in zip(self.native_shape, slices, strict=True)]
        if any(len(b) == 0 for b in bounds):
            return
        ranges = [range(b[0] // c, b[-1] // c + 1) for b, c in zip(bounds, shape, strict=True)]
        cells = list(itertools.product(*ranges))
        first = [b[0] for b in bounds]
        owned = {c for c in cells if missing.owns(c, shape, first)}
        is_fill = np.isnan(block) if self._fill_is_nan() else block == self.fill_value
        if not is_fill.any():
            missing.account(self.url, [], owned=len(owned), owned_absent=[], fill_missing=True)
            return
        empty = []
        for cell in cells:
            region = tuple(
                slice(max(g * c, b[0]) - b[0], min((g + 1) * c, b[-1] + 1) - b[0])
                for g, c, b in zip(cell, shape, bounds, strict=True)
            )
            if is_fill[region].all():
                empty.append((cell, key_of(cell)))
        kv = self._open().kvstore
        reads = [(cell, key, kv.read(key)) for cell, key in empty]
        absent = [(cell, key) for cell, key, read in reads if read.result().state == "missing"]
        missing.account(
            self.url,
            [key for _, key in absent],
            owned=len(owned),
            owned_absent=[key for cell, key in absent if cell in owned],
            fill_missing=True,
            what="chunk",
        )

    def _fill_is_nan(self) -> bool:
        return self.dtype.kind == "f" and bool(np.isnan(self.fill_value))

    def location(self) -> str | None:
        """Where the array lies; a spec given as JSON text, where its kvstore says."""
        if self.url.startswith(INLINE_SPEC):
            return self.root
        return super().location()

    def data_location(self) -> str | None:
        """The URL of the store the array's data lies in, where TensorStore can say."""
        try:
            return str(self._open().kvstore.url)
        except (NotImplementedError, ValueError, AttributeError):
            return None

    def identity(self) -> dict[str, Any]:
        """The array's metadata object: a digest of its bytes and the store's generation of
        it (a local file's change time and size, a GCS generation, an S3 ETag); for a spec,
        the spec itself."""
        store = self._open()
        kvstore = store.kvstore.spec(retain_context=False).to_json()
        if kvstore.get("driver") == "file":
            kvstore["path"] = os.path.realpath(kvstore.get("path", ""))
        out: dict[str, Any] = {"driver": self.spec["driver"], "kvstore": kvstore}
        key = METADATA_KEYS.get(self.spec["driver"])
        if key is None:
            return {**out, "spec": self.spec}
        try:
            result = store.kvstore.read(key).result()
        except ValueError as exc:
            raise SourceError(f"{self.url}: cannot read {key} ({exc})") from exc
        if result.state == "value":
            out[key] = {
                "sha256": hashlib.sha256(bytes(result.value)).hexdigest(),
                "generation": bytes(result.stamp.generation).hex(),
            }
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}


def _stored_chunks(store: Any) -> tuple[tuple[int, ...], Any] | None:
    """(stored chunk shape, grid cell -> its key) of a zarr, zarr3 or N5 array read whole
    (no index transform); None for any other array: its absent chunks are not counted."""
    spec = store.spec().to_json()
    driver, metadata = spec.get("driver"), spec.get("metadata") or {}
    transform = spec.get("transform") or {}
    if any(transform.get("input_inclusive_min", [])) or "output" in transform:
        return None
    shape = tuple(int(n) for n in store.chunk_layout.write_chunk.shape)
    if not shape or any(n <= 0 for n in shape) or math.prod(shape) <= 0:
        return None
    if driver == "zarr":
        separator = metadata.get("dimension_separator") or "."
        return shape, _Keys("", separator)
    if driver == "zarr3":
        encoding = metadata.get("chunk_key_encoding") or {}
        name = encoding.get("name", "default")
        default = "/" if name == "default" else "."
        separator = (encoding.get("configuration") or {}).get("separator", default)
        return shape, _Keys("c" if name == "default" else "", separator)
    if driver == "n5":
        return shape, _Keys("", "/")
    return None


class _Keys:
    """A chunk's key from its grid cell: `c/0/1/2`, `0.1.2`, `0/1/2`."""

    def __init__(self, prefix: str, separator: str):
        self.prefix, self.separator = prefix, separator

    def __call__(self, cell: tuple[int, ...]) -> str:
        parts = ([self.prefix] if self.prefix else []) + [str(i) for i in cell]
        return self.separator.join(parts)


def _open_failure(exc: ValueError) -> str:
    """What TensorStore says when it cannot open an array, in one line, not its spec dump."""
    return deadlines.tensorstore_cause(exc).split("\n")[0][:500]
