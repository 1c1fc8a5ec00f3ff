"""Zarr v3's driver: its part of planning (chunks always raw before the codec chain) and its
engines' steps."""

from shardwright.formats.zarr3 import layout, producers
from shardwright.planning.formats import FormatDriver, FormatPlanner

DRIVER = FormatDriver(
    FormatPlanner(layout.plan_volume, layout.OWN_OPTIONS, layout.check_options,
                  lambda layer_type, dtype: "raw", lambda options, encoding: None),
    producers.cpu_shard,
    producers.batched_shard,
)  # fmt: skip
