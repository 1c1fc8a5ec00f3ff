"""The CPU engine: the streaming producer of a volume shard (the oracle of the GPU engine).

A shard's region (its epochs read from the source, or a pyramid level's region handed up)
goes to its format's step (`cpu_shard` of the format's driver, `formats/<name>/producers.py`),
which encodes chunks with the C codecs into the format's streaming builder, whose spool keeps
encoded chunks in memory up to the plan's spool budget and on local disk beyond it. The
builder's finished file is the shard's pieces; `shard_task.run_task` does the rest (resume,
the one write, the receipt).
"""

from __future__ import annotations

from collections.abc import Iterable

from shardwright.common.receipts import Receipt
from shardwright.engine.blocks import Block, epoch_blocks
from shardwright.engine.shard_task import run_task
from shardwright.formats.shardfile import ShardFile
from shardwright.planning import ConversionPlan, ShardTask
from shardwright.planning.formats import driver
from shardwright.stores import Store


def run_shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    *,
    resume: bool = False,
    spool_dir: str | None = None,
) -> Receipt:
    """Produce one shard object on the CPU (or keep a proven one, when resuming)."""
    return run_task(task.key, store, CpuProducer(plan, task, spool_dir=spool_dir), resume=resume)


class CpuProducer:
    """A volume shard from chunks encoded one at a time into the format's streaming builder
    (its driver's `cpu_shard`).

    `blocks` replaces the source reads of a box shard (a pyramid's upper levels encode the
    region the level below handed up); it is not consumed unless the shard is produced.
    """

    def __init__(
        self,
        plan: ConversionPlan,
        task: ShardTask,
        *,
        spool_dir: str | None = None,
        blocks: Iterable[Block] | None = None,
    ):
        self.plan, self.task, self.spool_dir, self.blocks = plan, task, spool_dir, blocks

    def produce(self) -> ShardFile | None:
        layout = self.plan.layout
        return driver(layout.format).cpu_shard(self, layout)

    def region(self) -> Iterable[Block]:
        """The shard's blocks: its epochs read from the source, or the region handed up."""
        return epoch_blocks(self.plan, self.task) if self.blocks is None else self.blocks
