"""Which engine runs a volume's shard tasks, decided once per dataset: an object with the
calls a shard task makes, so that the job layer never tests engine names.

`cpu` is the streaming producer (the byte-exact oracle); `gpu` the batched pipeline over CuPy
(nvCOMP for gzip and zstd). Pyramid level shards go through `engine.pyramid` on either, in the
engine's array namespace. A third engine is one more class here and one name in `ENGINES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from shardwright.common.arrays import Namespace
from shardwright.common.receipts import Receipt
from shardwright.engine.cpu import run_shard as run_cpu_shard
from shardwright.engine.gpu import (  # CuPy itself only on GPU workers
    cupy_module,
    own_stream,
    run_shard_gpu,
)
from shardwright.engine.pyramid import Handoff, Piece, run_pyramid_shard
from shardwright.planning import ConversionPlan, ShardTask
from shardwright.stores import Store


@dataclass(frozen=True)
class Engine:
    """An engine's shard tasks. `gpu`: they must run on workers that declare a GPU."""

    name: ClassVar[str]
    gpu: ClassVar[bool]

    def namespace(self) -> Namespace | None:
        """The array namespace of its batched steps (None: the CPU engine's own NumPy code)."""
        return None

    def run_shard(
        self, plan: ConversionPlan, task: ShardTask, store: Store, *, resume: bool
    ) -> Receipt:
        raise NotImplementedError

    def run_level_shard(
        self,
        plan: ConversionPlan,
        task: ShardTask,
        store: Store,
        pieces: Sequence[Piece],
        *,
        resume: bool,
    ) -> tuple[Receipt | None, Handoff]:
        """One shard of a pyramid level (None: a stored base, read only), and the reduced
        pieces for the level above."""
        return run_pyramid_shard(plan, task, store, pieces, resume=resume, xp=self.namespace())


@dataclass(frozen=True)
class CpuEngine(Engine):
    name = "cpu"
    gpu = False

    def run_shard(
        self, plan: ConversionPlan, task: ShardTask, store: Store, *, resume: bool
    ) -> Receipt:
        return run_cpu_shard(plan, task, store, resume=resume)


@dataclass(frozen=True)
class GpuEngine(Engine):
    name = "gpu"
    gpu = True

    def namespace(self) -> Namespace:
        return cupy_module()

    def run_shard(
        self, plan: ConversionPlan, task: ShardTask, store: Store, *, resume: bool
    ) -> Receipt:
        return run_shard_gpu(plan, task, store, resume=resume)

    def run_level_shard(
        self,
        plan: ConversionPlan,
        task: ShardTask,
        store: Store,
        pieces: Sequence[Piece],
        *,
        resume: bool,
    ) -> tuple[Receipt | None, Handoff]:
        with own_stream(cupy_module()):
            return super().run_level_shard(plan, task, store, pieces, resume=resume)


ENGINES: dict[str, Engine] = {engine.name: engine for engine in (CpuEngine(), GpuEngine())}


def engine_for(plan: ConversionPlan) -> Engine:
    """The engine that runs `plan`'s shard tasks: its options decide, read here once."""
    return ENGINES[plan.options.engine]
