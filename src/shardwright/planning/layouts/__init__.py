"""A volume's output formats, each one module: `precomputed`, `zarr3` (`base`: what each
provides), and `zarr2`, which only the levels added to an OME-Zarr 0.4 group take (it is
planned from the array they are reduced from, never a conversion's `--format`). `FORMATS`
holds what each conversion format decides at planning: its plan from the decided geometry,
the options only it takes (every other format refuses them) and its checks of them, its
default chunk encoding. Each format's bytes are its folder of `formats/`
(`shardwright.formats.precomputed`, `shardwright.formats.zarr3`), which sits below the
planner and so cannot hold these modules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardwright.common.vocabulary import OutputFormat
from shardwright.options import ConvertOptions
from shardwright.planning import checks
from shardwright.planning.geometry import Geometry
from shardwright.planning.layouts import precomputed, zarr3
from shardwright.planning.layouts.base import ByteStage, LayoutVisitor, LevelGeometry, VolumeLayout
from shardwright.planning.layouts.precomputed import PrecomputedLayout
from shardwright.planning.layouts.zarr2 import Zarr2Layout
from shardwright.planning.layouts.zarr3 import Zarr3Layout
from shardwright.planning.volume import ConversionPlan


@dataclass(frozen=True)
class FormatPlanner:
    """A conversion format's part of planning, registered once in `FORMATS`."""

    plan_volume: Callable[[Geometry], ConversionPlan]
    own_options: tuple[str, ...]  # options only this format takes
    check_options: Callable[[ConvertOptions], None]  # its checks of what it takes
    default_encoding: Callable[[str, np.dtype], str]  # of a layer type and data type
    check_encoding: Callable[[ConvertOptions, str], None]  # once the encoding is decided


FORMATS: dict[str, FormatPlanner] = {
    OutputFormat.PRECOMPUTED: FormatPlanner(
        precomputed.plan_volume, precomputed.OWN_OPTIONS, precomputed.check_options,
        precomputed.default_encoding, checks.check_block_size,
    ),
    OutputFormat.ZARR3: FormatPlanner(
        zarr3.plan_volume, zarr3.OWN_OPTIONS, zarr3.check_options,
        lambda layer_type, dtype: "raw", lambda options, encoding: None,
    ),
}  # fmt: skip


def check_options_for_format(options: ConvertOptions) -> None:
    """Refuse the options the chosen format would ignore (another format's own), then what
    it refuses of its own, so that what the user asked for is honoured or refused, never
    dropped."""
    chosen = FORMATS[options.format]
    for name, other in FORMATS.items():
        if name != options.format:
            ignored = [o for o in other.own_options if o not in chosen.own_options]
            checks.refuse_given(options, ignored, f"{name} output; {options.format} output "
                                "ignores it")  # fmt: skip
    chosen.check_options(options)
    checks.check_compression_level(options)


__all__ = [
    "FORMATS",
    "ByteStage",
    "FormatPlanner",
    "LayoutVisitor",
    "LevelGeometry",
    "PrecomputedLayout",
    "VolumeLayout",
    "Zarr2Layout",
    "Zarr3Layout",
    "check_options_for_format",
]
