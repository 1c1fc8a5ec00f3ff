"""What a user asks a conversion to write: the options the CLI and the Python API share.

`ConvertOptions` is made of groups, one module each, each checked in one place (its
`check_*` method): the volume (`volume.py`), the output format (`output.py`), the meshes and
skeletons made from the segmentation (`generation/options.py`), what the dataset carries
beside its voxels (`companions.py`), the source as read and the stores (`stores.py`). Each
field the command line offers says so in its metadata (a `flags.Flag`: its flag, help, and
how its text becomes the value); the CLI's parser is built from those, a section of `--help`
per group, so an option is added in this one place. How a job runs (where, resumed or not,
its lease) is `run_options.RunOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardwright.common.flags import spelled
from shardwright.common.memory import MemoryBudget
from shardwright.generation.options import ObjectOptions
from shardwright.options.companions import CompanionOptions
from shardwright.options.output import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_INDEX_LOCATION,
    DEFAULT_JPEG_QUALITY,
    DEFAULT_ZARR_LAYOUT,
    FORMATS,
    OutputOptions,
)
from shardwright.options.stores import StoreOptions
from shardwright.options.volume import VolumeOptions


@dataclass(frozen=True)
class ConvertOptions(StoreOptions, CompanionOptions, ObjectOptions, OutputOptions, VolumeOptions):
    """Every size is written x, y, z; None means "choose for me" (planning/). The fields are
    in the order `--help` lists them: the groups' in the order of their sections (the last
    base first), each group's in its own order."""

    @property
    def budget(self) -> MemoryBudget:
        """`memory_budget` divided by name among what a task holds."""
        return MemoryBudget(self.memory_budget)

    def resolved(self) -> ConvertOptions:
        """The options with every encoding default filled in (what a plan runs with); the
        fields stay None until then so that the planner can tell what the user gave."""
        block, quality, location, layout = (
            self.compressed_segmentation_block_size,
            self.jpeg_quality,
            self.index_location,
            self.zarr_layout,
        )
        return replace(
            self,
            compressed_segmentation_block_size=DEFAULT_BLOCK_SIZE if block is None else block,
            jpeg_quality=DEFAULT_JPEG_QUALITY if quality is None else quality,
            index_location=DEFAULT_INDEX_LOCATION if location is None else location,
            zarr_layout=DEFAULT_ZARR_LAYOUT if layout is None else layout,
        )

    def __post_init__(self) -> None:
        spelled(self)  # "2G", "4,4,40": the API takes the command line's spellings
        self.check_volume()
        self.check_output()
        self.check_objects()
        self.check_companions()
        self.check_stores()


__all__ = ["FORMATS", "ConvertOptions"]
