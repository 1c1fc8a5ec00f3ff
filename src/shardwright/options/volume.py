"""The volume's options: what it holds, where it sits, its chunks, its pyramid, the memory a
task may take and where tasks run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shardwright.common.downsample import METHOD_HELP as DOWNSAMPLE_HELP
from shardwright.common.downsample import METHODS as DOWNSAMPLE_METHODS
from shardwright.common.flags import XYZ, cli, format_size, parse_mips, parse_size, parse_xyz
from shardwright.common.option_checks import check_choice, whole
from shardwright.common.vocabulary import VolumeType, names
from shardwright.errors import NAMED, OptionError

GiB = 1024**3
MiB = 1024**2
LAYER_TYPES = ("auto", *names(VolumeType))  # auto: segmentation for integer labels
ENGINES = ("cpu", "gpu")


@dataclass(frozen=True)
class VolumeOptions:
    """The volume: what it holds, its placement, chunks and pyramid, a task's memory."""

    TITLE: ClassVar[str] = "the volume"

    layer_type: str = field(
        default="auto",
        metadata=cli(
            "--layer-type",
            "what the volume holds; auto: as the source says, else segmentation for uint32 and "
            "uint64 voxels, image otherwise",
            choices=LAYER_TYPES,
        ),
    )
    chunk_size: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli("--chunk-size", "default 64,64,64", parse=parse_xyz(int), metavar=XYZ),
    )
    resolution: tuple[float, float, float] | None = field(
        default=None,
        metadata=cli(
            "--resolution",
            "nm per voxel (default: the source's, e.g. OME-Zarr scale, else 1,1,1)",
            parse=parse_xyz(float),
            metavar=XYZ,
        ),
    )
    voxel_offset: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli(
            "--voxel-offset",
            "voxel coordinates of the volume's corner (default: the source's, else 0,0,0)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    # Pyramids: levels above the base (an int, or "auto": down to about one chunk), the factor
    # between levels (default by voxel size) and the reduction (default: average for images, mode
    # for segmentations). None / 0 mips: a single level, written exactly as without pyramids.
    mips: int | str | None = field(
        default=None,
        metadata=cli(
            "--mips",
            "also build a pyramid of N downsampled levels in the same job, every level "
            "sharded (auto: down to about one chunk); the source is read once",
            parse=parse_mips,
            metavar="N|auto",
        ),
    )
    factor: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli(
            "--factor",
            "downsampling factor between pyramid levels (default: the source's own pyramid's, "
            "else by voxel size: axes twice the finest or more kept, 2,2,1 for EM, else 2,2,2)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    downsample: str | None = field(
        default=None,
        metadata=cli("--downsample", DOWNSAMPLE_HELP, choices=DOWNSAMPLE_METHODS),
    )
    memory_budget: int = field(
        default=1 * GiB,
        metadata=cli("--memory-budget", "per shard task", parse=parse_size, metavar="SIZE"),
    )
    engine: str = field(  # "gpu": shard tasks run the batched pipeline on CUDA workers
        default="cpu",
        metadata=cli(
            "--gpu",
            "run shard tasks on GPUs: a dask-cuda cluster here, or the workers of --scheduler "
            "ADDRESS started with --resources GPU=1 (raw and compressed_segmentation)",
            switch="gpu",
        ),
    )

    def check_volume(self) -> None:
        """The volume's options, each within what it can be."""
        check_choice(self, "engine", ENGINES, "an engine")
        if not whole(self.memory_budget, 16 * MiB):
            raise OptionError(
                "{memory_budget} must be bytes or a size such as 512M, at least "
                f"{format_size(16 * MiB)}",
                memory_budget=self.memory_budget,
            )
        mips = self.mips
        if (
            mips is not None
            and mips != "auto"
            and (isinstance(mips, bool) or not isinstance(mips, int) or mips < 0)
        ):
            raise OptionError(
                f"{{mips}} must be a non-negative integer or 'auto', got {mips!r}", mips=NAMED
            )
        if self.downsample is not None and self.downsample not in DOWNSAMPLE_METHODS:
            raise OptionError(
                f"{{downsample}} is not a downsampling method; choose one of {DOWNSAMPLE_METHODS}",
                downsample=self.downsample,
            )
