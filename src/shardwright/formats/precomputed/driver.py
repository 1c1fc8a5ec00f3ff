"""Neuroglancer precomputed's driver: its part of planning and its engines' steps."""

from shardwright.formats.precomputed import layout, producers
from shardwright.planning import checks
from shardwright.planning.formats import FormatDriver, FormatPlanner

DRIVER = FormatDriver(
    FormatPlanner(layout.plan_volume, layout.OWN_OPTIONS, layout.check_options,
                  layout.default_encoding, checks.check_block_size),
    producers.cpu_shard,
    producers.batched_shard,
)  # fmt: skip
