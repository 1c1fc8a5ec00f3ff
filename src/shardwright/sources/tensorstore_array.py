"""Arrays TensorStore opens (zarr v2/v3, precomputed) on local disk, GCS, S3 or HTTP(S).

Shared by the zarr and precomputed sources: the kvstore spec built from a URL, small JSON
metadata reads, and the picklable TensorStore-backed source.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any
from urllib.parse import urlparse

import numpy as np
import tensorstore as ts

from shardwright.errors import SourceError
from shardwright.sources.base import ArraySource, SourceHints

# The metadata object of an array, by TensorStore driver: what identifies it.
METADATA_KEYS = {"zarr3": "zarr.json", "zarr": ".zarray", "neuroglancer_precomputed": "info"}


def endpoint_url(storage_options: dict[str, Any] | None) -> str | None:
    """A custom endpoint (MinIO, Ceph, an emulator) given fsspec-style."""
    options = storage_options or {}
    return options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")


def kvstore_spec(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """TensorStore kvstore spec for a local path, file://, gs://, s3:// or http(s):// directory.

    Credentials come from the standard chains (environment, profiles, workload identity /
    IRSA); a custom endpoint from the fsspec-style storage options. TensorStore's GCS driver
    takes its endpoint only from $TENSORSTORE_GCS_HTTP_URL, which is set for it here.
    """
    parsed = urlparse(url)
    path = parsed.path.strip("/") + "/"
    endpoint = endpoint_url(storage_options)
    if parsed.scheme in ("gs", "gcs"):
        if endpoint:
            os.environ["TENSORSTORE_GCS_HTTP_URL"] = endpoint
        return {"driver": "gcs", "bucket": parsed.netloc, "path": path}
    if parsed.scheme == "s3":
        spec: dict[str, Any] = {"driver": "s3", "bucket": parsed.netloc, "path": path}
        if endpoint:
            spec["endpoint"] = endpoint
        region = (storage_options or {}).get("client_kwargs", {}).get("region_name")
        if region or endpoint:
            spec["aws_region"] = region or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        return spec
    if parsed.scheme in ("http", "https"):
        return {"driver": "http", "base_url": f"{parsed.scheme}://{parsed.netloc}", "path": path}
    local = parsed.path if parsed.scheme == "file" else url
    return {"driver": "file", "path": os.path.abspath(local) + "/"}


def read_json(
    url: str, key: str, storage_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A small JSON object next to the data (`info`, `zarr.json`, `.zarray`), or None."""
    try:
        kv = ts.KvStore.open(kvstore_spec(url, storage_options)).result()
        result = kv.read(key).result()
    except ValueError as exc:
        raise SourceError(f"{url}: cannot read {key} ({exc})") from exc
    if result.state != "value":
        return None
    try:
        value = json.loads(bytes(result.value))
    except ValueError as exc:
        raise SourceError(f"{url}/{key}: not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SourceError(f"{url}/{key}: expected a JSON object, found {type(value).__name__}")
    return value


class TensorStoreSource(ArraySource):
    """Any array TensorStore opens; the spec is kept (not the handle) for pickling."""

    def __init__(
        self,
        url: str,
        spec: dict[str, Any],
        axes: str | None,
        hints: SourceHints | None = None,
        translate: bool = False,
        storage_options: dict[str, Any] | None = None,
        detected_axes: str | None = None,
    ):
        self.spec = spec
        # Kept for worker processes: TensorStore reads a GCS endpoint from the environment.
        self._gcs_endpoint = (
            endpoint_url(storage_options) if spec["kvstore"]["driver"] == "gcs" else None
        )
        self._translate = translate
        self._store: Any = None
        try:
            store = self._open()
        except ValueError as exc:
            raise SourceError(f"{url}: cannot open ({exc})") from exc
        super().__init__(
            url,
            tuple(store.shape),
            store.dtype.numpy_dtype,
            axes,
            hints,
            detected_axes=detected_axes,
        )
        # x-fastest storage (precomputed) reads straight into an F-order block, so the
        # [x, y, z, c] result is F-contiguous like the transpose of a C-order z,y,x read.
        self._order = "F" if self.axes in ("xyz", "xyzc") else "C"

    def _open(self) -> Any:
        if self._store is None:
            if self._gcs_endpoint:
                os.environ["TENSORSTORE_GCS_HTTP_URL"] = self._gcs_endpoint
            store = ts.open(
                self.spec, read=True, context=ts.Context({"cache_pool": {"total_bytes_limit": 0}})
            ).result()
            # A domain that starts at the voxel offset is read from 0 here, like every source.
            self._store = store.translate_to[(0,) * store.rank] if self._translate else store
        return self._store

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        return np.asarray(self._open()[slices].read(order=self._order).result())

    def identity(self) -> dict[str, Any]:
        """The array's metadata object: a digest of its bytes and the store's generation of
        it (a local file's change time and size, a GCS generation, an S3 ETag)."""
        key = METADATA_KEYS.get(self.spec["driver"])
        kvstore = self.spec["kvstore"]
        where = kvstore.get("path", "")
        if kvstore["driver"] == "file":
            where = os.path.realpath(where)
        out: dict[str, Any] = {"driver": self.spec["driver"], "store": kvstore["driver"],
                               "bucket": kvstore.get("bucket"), "path": where}  # fmt: skip
        if key is None:
            return out
        try:
            result = ts.KvStore.open(kvstore).result().read(key).result()
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
