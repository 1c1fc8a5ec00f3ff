"""Zarr v3's driver: its part of planning (chunks always raw before the codec chain), its
engines' steps and what verify asks of its datasets."""

from shardwright.formats.zarr3 import layout, producers, verifying
from shardwright.planning.formats import FormatDriver, FormatPlanner

DRIVER = FormatDriver(
    FormatPlanner(layout.plan_volume, layout.OWN_OPTIONS, layout.check_options,
                  lambda layer_type, dtype: "raw", lambda options, encoding: None),
    producers.cpu_shard,
    producers.batched_shard,
    verifying.READER,
)  # fmt: skip
