"""Planning: everything decided about a conversion before any byte is written.

- `base`: the `Plan` protocol both plan kinds implement (`dataset`: volume or objects).
- `geometry`: a volume's layout (`Geometry`), chunk and epoch shapes, axis orders.
- `pyramid`: pyramid geometry (level sizes, boxes) and what each level's shards may be.
- `sharding`: the sharding choice by encoded bytes (sampled), precomputed and zarr3.
- `volume`: `ConversionPlan` and `ShardTask`: shard list, epochs, memory, level relations.
- `layout`: what the plan asks of its output format (`VolumeLayout`, each format's own in its
  folder of `formats/`); `formats`: the formats' drivers, found by name.
- `levels`: the plans of a pyramid's upper levels. `builder`: `make_plan`.
- `objects`: meshes and skeletons (`ObjectPlan`); `conversion`: what a source is planned as
  (`plan_conversion`), meshes and skeletons in a volume's job. `feeding`: block groups that
  hand a pyramid's first new level its voxels. (What is added to a dataset that exists is
  planned in `additions/`, above the formats' drivers.)
- `capabilities`: what each engine can run, as data. `checks`: values no conversion can
  honour. `report`, `text`: the printed plan.
"""

from __future__ import annotations

from shardwright.planning.annotations import AnnotationPlan
from shardwright.planning.base import Plan
from shardwright.planning.builder import make_plan
from shardwright.planning.conversion import plan_conversion, with_companions
from shardwright.planning.geometry import to_zarr_order
from shardwright.planning.objects import ObjectPlan, ObjectShardTask, make_object_plan
from shardwright.planning.pyramid import Box
from shardwright.planning.volume import ConversionPlan, ShardTask

__all__ = [
    "AnnotationPlan",
    "Box",
    "ConversionPlan",
    "ObjectPlan",
    "ObjectShardTask",
    "Plan",
    "ShardTask",
    "make_object_plan",
    "make_plan",
    "plan_conversion",
    "to_zarr_order",
    "with_companions",
]
