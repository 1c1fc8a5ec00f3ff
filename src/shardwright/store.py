"""The store a dataset is read and written through: `Store(url, storage_options, run)` gives
the backend that owns the URL (stores/: local disk, memory://, gs://, s3:// and other fsspec
filesystems). Objects are written whole, requests counted and retried; a store that a job's
run writes through asks the run's fence (lifecycle/fencing.py) before each data object.
"""

from __future__ import annotations

from shardwright.errors import LeaseLost, StoreError
from shardwright.stores.base import (
    CONTROL_PREFIX,
    TMP_MARKER,
    JobRun,
    Store,
    backend_for,
    halt,
    halted,
)

__all__ = ["CONTROL_PREFIX", "TMP_MARKER", "JobRun", "LeaseLost", "Store", "StoreError",
           "backend_for", "halt", "halted"]  # fmt: skip
