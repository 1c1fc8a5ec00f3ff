"""What a user asks of a conversion: the options the CLI and the Python API share."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shardwright.downsample import METHODS as DOWNSAMPLE_METHODS

GiB = 1024**3
MiB = 1024**2

FORMATS = ("precomputed", "zarr3")
COMPRESSIONS = ("none", "gzip", "zstd", "blosc")
ENGINES = ("cpu", "gpu")


DEFAULT_BLOCK_SIZE = (8, 8, 8)
DEFAULT_JPEG_QUALITY = 85
DEFAULT_INDEX_LOCATION = "end"


@dataclass(frozen=True)
class ConvertOptions:
    """Every size is written x, y, z; None means "choose for me" (see plan.py)."""

    format: str = "precomputed"
    layer_type: str | None = None
    encoding: str = "raw"
    compression: str | None = None
    compression_level: int | None = None
    chunk_size: tuple[int, int, int] | None = None
    resolution: tuple[float, float, float] | None = None
    voxel_offset: tuple[int, int, int] | None = None
    scale_key: str | None = None
    compressed_segmentation_block_size: tuple[int, int, int] | None = None  # default 8,8,8
    jpeg_quality: int | None = None  # default 85
    target_shard_bytes: int = 1 * GiB
    memory_budget: int = 1 * GiB
    min_shards: int = 16  # automatic sharding keeps at least this many shards, volume allowing
    preshift_bits: int | None = None
    minishard_bits: int | None = None
    shard_bits: int | None = None
    hash: str | None = None
    shard_shape: tuple[int, int, int] | None = None
    index_location: str | None = None  # zarr3 shard index: "end" (default), or "start" for
    # stores without suffix range reads
    source_axes: str | None = None
    source_scale: str | None = None
    engine: str = "cpu"  # "gpu": shard tasks run the batched pipeline on CUDA workers
    # Pyramids: levels above the base (an int, or "auto": down to about one chunk), the factor
    # between levels (default 2,2,2) and the reduction (default: average for images, mode for
    # segmentations). None / 0 mips: a single level, written exactly as without pyramids.
    mips: int | str | None = None
    factor: tuple[int, int, int] | None = None
    downsample: str | None = None
    # Legacy single-resolution meshes have no sharded form: re-encode them as one-level
    # multi-resolution Draco meshes only when asked.
    legacy_to_multires: bool = False
    # A precomputed segmentation's meshes / skeletons (the directories its info names),
    # converted to their sharded form in the same job.
    with_meshes: bool = False
    with_skeletons: bool = False
    # fsspec options (credentials among them): never shown in reprs, logs or the dashboard.
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # destination
    source_storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def resolved(self) -> ConvertOptions:
        """The options with every encoding default filled in (what a plan runs with); the
        fields stay None until then so that the planner can tell what the user gave."""
        block, quality, location = (
            self.compressed_segmentation_block_size,
            self.jpeg_quality,
            self.index_location,
        )
        return replace(
            self,
            compressed_segmentation_block_size=DEFAULT_BLOCK_SIZE if block is None else block,
            jpeg_quality=DEFAULT_JPEG_QUALITY if quality is None else quality,
            index_location=DEFAULT_INDEX_LOCATION if location is None else location,
        )

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown output format {self.format!r}; choose one of {FORMATS}")
        if self.compression is not None and self.compression not in COMPRESSIONS:
            raise ValueError(
                f"unknown compression {self.compression!r}; choose one of {COMPRESSIONS}"
            )
        if self.index_location not in (None, "start", "end"):
            raise ValueError(f"index location must be start or end, got {self.index_location!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose one of {ENGINES}")
        if self.memory_budget < 16 * MiB:
            raise ValueError(f"memory budget {self.memory_budget} bytes is below 16 MiB")
        if self.target_shard_bytes <= 0:
            raise ValueError(f"target shard bytes must be positive, got {self.target_shard_bytes}")
        if (
            self.mips is not None
            and self.mips != "auto"
            and (isinstance(self.mips, bool) or not isinstance(self.mips, int) or self.mips < 0)
        ):
            raise ValueError(f"mips must be a non-negative integer or 'auto', got {self.mips!r}")
        if self.downsample is not None and self.downsample not in DOWNSAMPLE_METHODS:
            raise ValueError(
                f"unknown downsampling method {self.downsample!r}; choose one of "
                f"{DOWNSAMPLE_METHODS}"
            )
