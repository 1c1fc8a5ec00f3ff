"""Zarr v2's driver: no conversion writes it (only levels added to an OME-Zarr 0.4 group,
planned from the array they are reduced from by `layout.plan_volume`); its engines' steps."""

from shardwright.formats.zarr2 import producers
from shardwright.planning.formats import FormatDriver

DRIVER = FormatDriver(None, producers.cpu_shard, producers.batched_shard)
