"""The shard task, written once for every shard kind and engine.

A task keeps its shard when resuming and the journal proves it intact (`journal.proven`);
otherwise its producer makes the shard's pieces and the task writes them as one object, once
(ARCHITECTURE invariant 1). Either way it returns the typed `Receipt`, with the requests the
task made on its stores and its seconds, measured here and nowhere else.

Producers are what differs: the streaming CPU engine (`cpu.py`), the batched pipeline over
numpy or CuPy (`batched.py`), segment objects (`objects.py`); pyramid level shards
(`pyramid.py`) use the first two.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from shardwright.common.receipts import Receipt, sum_requests
from shardwright.engine.stages import Stages, timer
from shardwright.formats.shardfile import ShardFile
from shardwright.lifecycle import journal
from shardwright.sources import missing
from shardwright.stores import Store


class Producer(Protocol):
    """The engine's part of a shard task: the shard's pieces, ready for their one write."""

    def produce(self) -> ShardFile | None:
        """The finished shard (its spool released by `close`), or None when every chunk is
        the fill value and nothing is stored (zarr3). Releases what it holds if it fails."""
        ...


def run_task(
    key: str,
    store: Store,
    producer: Producer,
    *,
    resume: bool = False,
    level: int | None = None,
    also_counted: Sequence[Store] = (),
    on_kept: Callable[[], object] | None = None,
    stages: Stages | None = None,
) -> Receipt:
    """Store the shard at `key` (or keep it, when resuming and it is proven) and return the
    receipt.

    `level`: the pyramid level the receipt names; `also_counted`: other stores the producer
    reads (a mesh source), whose requests the receipt counts too; `on_kept`: what a kept
    shard's task must still do (a pyramid still reduces its voxels for the level above);
    `stages`: where a benchmark collects the time of the write.
    """
    started = time.perf_counter()
    counted = [store, *also_counted]
    before = [s.requests.snapshot() for s in counted]
    receipt = journal.proven(store, key) if resume else None
    if receipt is not None:
        if on_kept is not None:
            on_kept()
    else:
        with missing.counting() as absent:
            shard = producer.produce()
        receipt = dataclasses.replace(
            _write(key, store, shard, stages),
            missing=absent.missing,
            missing_examples=tuple(absent.examples),
        )
    return dataclasses.replace(
        receipt,
        requests=sum_requests(s.requests.since(b) for s, b in zip(counted, before, strict=True)),
        seconds=round(time.perf_counter() - started, 4),
        level=level,
    )


def _write(key: str, store: Store, shard: ShardFile | None, stages: Stages | None) -> Receipt:
    if shard is None:
        return Receipt.nothing_stored(key)
    try:
        with timer(stages)("write"):
            size, crc = store.write_object(key, shard.pieces, size=shard.nbytes)
    finally:
        shard.close()
    return Receipt(key, size, crc, shard.chunk_count)
