"""Stores as backends: the `Store` protocol and what every backend shares (`base`), and one
module per backend, each registered for the URL protocols it owns: `local` (a path, file://),
`memory` (memory://), `fsspec_store` (every other fsspec protocol: gs://, s3://, ...).
Importing any part of this package registers them all, so `Store(url)` always finds its
backend."""

from shardwright.stores import fsspec_store, local, memory

__all__ = ["fsspec_store", "local", "memory"]
