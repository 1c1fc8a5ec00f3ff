"""Zarr v2's driver: no conversion writes it (only levels added to an OME-Zarr 0.4 group,
planned from the array they are reduced from by `layout.plan_volume`); its engines' steps;
what verify asks of a group of its arrays (unsharded: read as a source); what an addition
asks of the group (`adding.py`)."""

from shardwright.formats.zarr2 import adding, producers
from shardwright.formats.zarr2.array import as_group_document
from shardwright.formats.zarr3.ome_zarr import dataset_paths
from shardwright.planning.formats import FormatDriver, FormatReader

# An OME-Zarr 0.4 group (`.zattrs` beside `.zgroup`): its arrays have no shards; verify reads
# it as a source.
READER = FormatReader(
    ".zattrs", lambda documents: False, None, lambda document: [],
    lambda zattrs: dataset_paths(as_group_document(zattrs)) or [], beside=(".zgroup",),
)  # fmt: skip

DRIVER = FormatDriver(None, producers.cpu_shard, producers.batched_shard, READER, adding.ADDING)
