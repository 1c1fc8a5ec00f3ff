"""Zarr v3's driver: its part of planning (chunks always raw before the codec chain), its
engines' steps, what verify asks of its datasets and what an addition asks of an OME-Zarr
group that exists."""

from shardwright.formats.zarr3 import adding, layout, producers, verifying
from shardwright.planning.formats import FormatDriver, FormatPlanner

DRIVER = FormatDriver(
    FormatPlanner(layout.plan_volume, layout.OWN_OPTIONS, layout.check_options,
                  lambda layer_type, dtype: "raw", lambda options, encoding: None),
    producers.cpu_shard,
    producers.batched_shard,
    verifying.READER,
    adding.ADDING,
)  # fmt: skip
