"""A shard task's receipt, the same from every engine: what it stored, the requests it made
and how long it took (the coordinator folds receipts into the manifest)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from shardwright.planning import ShardTask
from shardwright.store import Store

Receipt = dict[str, Any]


def stored(task: ShardTask, size: int, crc: int, chunks: int, empty: bool = False) -> Receipt:
    """The receipt of a shard this task wrote (or found entirely empty: nothing stored)."""
    return {
        "key": task.key,
        "size": size,
        "crc32c": crc,
        "chunks": chunks,
        "resumed": False,
        "empty": empty,
    }


def measured(store: Store, produce: Callable[[], Receipt]) -> Receipt:
    """Run a shard task's `produce` and add to its receipt the requests this thread made on
    `store` meanwhile and the task's seconds."""
    started = time.perf_counter()
    before = store.requests.snapshot()
    receipt = produce()
    receipt["requests"] = store.requests.since(before)
    receipt["seconds"] = round(time.perf_counter() - started, 4)
    return receipt
