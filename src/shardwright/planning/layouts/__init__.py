"""A volume's output formats, each one module: `precomputed`, `zarr3` (`base`: what each
provides), and `zarr2`, which only the levels added to an OME-Zarr 0.4 group take (it is
planned from the array they are reduced from, not by `PLANNERS`). `PLANNERS` makes a
format's plan from the decided geometry. Each format's bytes
are its folder of `formats/` (`shardwright.formats.precomputed`, `shardwright.formats.zarr3`),
which sits below the planner and so cannot hold these modules."""

from __future__ import annotations

from collections.abc import Callable

from shardwright.common.vocabulary import OutputFormat
from shardwright.planning.geometry import Geometry
from shardwright.planning.layouts import precomputed, zarr3
from shardwright.planning.layouts.base import ByteStage, LayoutVisitor, LevelGeometry, VolumeLayout
from shardwright.planning.layouts.precomputed import PrecomputedLayout
from shardwright.planning.layouts.zarr2 import Zarr2Layout
from shardwright.planning.layouts.zarr3 import Zarr3Layout
from shardwright.planning.volume import ConversionPlan

PLANNERS: dict[str, Callable[[Geometry], ConversionPlan]] = {
    OutputFormat.PRECOMPUTED: precomputed.plan_volume,
    OutputFormat.ZARR3: zarr3.plan_volume,
}

__all__ = [
    "PLANNERS",
    "ByteStage",
    "LayoutVisitor",
    "LevelGeometry",
    "PrecomputedLayout",
    "VolumeLayout",
    "Zarr2Layout",
    "Zarr3Layout",
]
