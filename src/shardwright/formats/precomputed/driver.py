"""Neuroglancer precomputed's driver: its part of planning, its engines' steps, what verify
asks of its datasets and what an addition asks of a volume that exists."""

from shardwright.formats.precomputed import adding, layout, producers, verifying
from shardwright.planning import checks
from shardwright.planning.formats import FormatDriver, FormatPlanner

DRIVER = FormatDriver(
    FormatPlanner(layout.plan_volume, layout.OWN_OPTIONS, layout.check_options,
                  layout.default_encoding, checks.check_block_size),
    producers.cpu_shard,
    producers.batched_shard,
    verifying.READER,
    adding.ADDING,
)  # fmt: skip
