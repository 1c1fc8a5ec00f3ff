"""Arrays TensorStore opens (zarr v2/v3, precomputed) on local disk, GCS or S3."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlparse

import numpy as np
import tensorstore as ts

from shardwright.sources.base import ArraySource, SourceError, SourceHints


def kvstore_spec(url: str) -> dict[str, Any]:
    """TensorStore kvstore spec for a local path, file://, gs:// or s3:// URL (a directory)."""
    parsed = urlparse(url)
    path = parsed.path.strip("/") + "/"
    if parsed.scheme == "gs":
        return {"driver": "gcs", "bucket": parsed.netloc, "path": path}
    if parsed.scheme == "s3":
        return {"driver": "s3", "bucket": parsed.netloc, "path": path}
    local = parsed.path if parsed.scheme == "file" else url
    return {"driver": "file", "path": os.path.abspath(local) + "/"}


def read_json(url: str, key: str) -> dict[str, Any] | None:
    """A small JSON object next to the data (`info`, `zarr.json`, `.zarray`), or None."""
    kv = ts.KvStore.open(kvstore_spec(url)).result()
    result = kv.read(key).result()
    if result.state != "value":
        return None
    try:
        return json.loads(bytes(result.value))
    except ValueError as exc:
        raise SourceError(f"{url}/{key}: not valid JSON ({exc})") from exc


class TensorStoreSource(ArraySource):
    """Any array TensorStore opens; the spec is kept (not the handle) for pickling."""

    def __init__(
        self,
        url: str,
        spec: dict[str, Any],
        axes: str | None,
        hints: SourceHints | None = None,
        translate: bool = False,
    ):
        self.spec = spec
        self._translate = translate
        self._store: Any = None
        try:
            store = self._open()
        except ValueError as exc:
            raise SourceError(f"{url}: cannot open ({exc})") from exc
        super().__init__(url, tuple(store.shape), store.dtype.numpy_dtype, axes, hints)

    def _open(self) -> Any:
        if self._store is None:
            store = ts.open(
                self.spec, read=True, context=ts.Context({"cache_pool": {"total_bytes_limit": 0}})
            ).result()
            self._store = store.translate_to[(0,) * store.rank] if self._translate else store
        return self._store

    def _read(self, slices: tuple[slice, ...]) -> np.ndarray:
        return np.asarray(self._open()[slices].read().result())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}
