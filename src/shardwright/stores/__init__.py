"""Stores: a dataset root whose keys are '/'-separated paths, written whole. `open_store(url)`
(`registry`) opens the backend that owns the URL's protocol: `local` (a path, file://),
`memory` (memory://), `fsspec_store` (every other fsspec protocol: gs://, s3://, ...); `base`
holds the abstract `Store` and what every backend shares."""

from shardwright.stores.base import Store, halt, halted
from shardwright.stores.registry import backend_for, open_store

__all__ = ["Store", "backend_for", "halt", "halted", "open_store"]
