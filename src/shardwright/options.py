"""What a user asks a conversion to write: the options the CLI and the Python API share.

Each field of `ConvertOptions` that the command line offers says so in its metadata (a
`flags.Flag`: its flag, help, and how its text becomes the value); the CLI's parser is built
from those, so an option is added in this one place. How a job runs (where, resumed or not,
its lease) is `run_options.RunOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shardwright.codecs import BYTE_CODECS, CHUNK_ENCODINGS
from shardwright.common.deadlines import DEFAULT_TIMEOUT
from shardwright.common.downsample import METHOD_HELP as DOWNSAMPLE_HELP
from shardwright.common.downsample import METHODS as DOWNSAMPLE_METHODS
from shardwright.common.flags import (
    XYZ,
    cli,
    format_size,
    parse_enum,
    parse_json_object,
    parse_mips,
    parse_pair,
    parse_size,
    parse_xyz,
    spelled,
)
from shardwright.common.memory import MemoryBudget
from shardwright.common.option_checks import (
    check_annotations,
    check_choice,
    check_numbers,
    check_storage_options,
    whole,
)
from shardwright.common.vocabulary import (
    ADDED_ONLY_FORMATS,
    IndexLocation,
    OutputFormat,
    ShardHash,
    VolumeType,
    names,
)
from shardwright.errors import OptionError
from shardwright.generation.options import ObjectOptions

GiB = 1024**3
MiB = 1024**2

# What a conversion writes (Zarr v2 is written only as levels added to an OME-Zarr 0.4 group).
FORMATS = tuple(name for name in names(OutputFormat) if name not in ADDED_ONLY_FORMATS)
LAYER_TYPES = ("auto", *names(VolumeType))  # auto: segmentation for integer labels
ENCODINGS = tuple(CHUNK_ENCODINGS)  # the codecs' registry names them
COMPRESSIONS = ("none", *BYTE_CODECS)
HASHES = names(ShardHash)
INDEX_LOCATIONS = names(IndexLocation)
ZARR_LAYOUTS = ("ome", "array")
ENGINES = ("cpu", "gpu")
ANNOTATION_TYPES = ("point", "line", "axis_aligned_bounding_box", "ellipsoid")
DEFAULT_ANNOTATION_LIMIT = 10_000


DEFAULT_BLOCK_SIZE = (8, 8, 8)
DEFAULT_JPEG_QUALITY = 85
DEFAULT_INDEX_LOCATION = "end"
DEFAULT_ZARR_LAYOUT = "ome"


_AUTOMATIC_SHARDING = "precomputed sharding (default: from --target-shard-bytes)"


@dataclass(frozen=True)
class ConvertOptions(ObjectOptions):
    """Every size is written x, y, z; None means "choose for me" (planning/). The fields are
    in the order `--help` lists them."""

    format: str = field(
        default="precomputed", metadata=cli("--format", "output format", choices=FORMATS)
    )
    layer_type: str = field(
        default="auto",
        metadata=cli(
            "--layer-type",
            "what the volume holds; auto: as the source says, else segmentation for uint32 and "
            "uint64 voxels, image otherwise",
            choices=LAYER_TYPES,
        ),
    )
    encoding: str | None = field(
        default=None,
        metadata=cli(
            "--encoding",
            "precomputed chunk encoding (default: compressed_segmentation for uint32/uint64 "
            "segmentations, raw otherwise)",
            choices=ENCODINGS,
        ),
    )
    compression: str | None = field(
        default=None,
        metadata=cli(
            "--compression",
            "precomputed data_encoding (none|gzip) or zarr3 inner codec; "
            "default gzip (none for jpeg/png)",
            choices=COMPRESSIONS,
        ),
    )
    compression_level: int | None = field(
        default=None,
        metadata=cli(
            "--compression-level",
            "gzip 0-9, zstd 1-22, blosc 0-9 (default: gzip 6, zstd 3, blosc 5)",
            parse=int,
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
    scale_key: str | None = field(
        default=None,
        metadata=cli("--scale-key", "precomputed scale key (default from the resolution)"),
    )
    compressed_segmentation_block_size: tuple[int, int, int] | None = field(
        default=None,  # resolved(): DEFAULT_BLOCK_SIZE
        metadata=cli(
            "--block-size",
            "compressed_segmentation block size (default 8,8,8)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    jpeg_quality: int | None = field(
        default=None,  # resolved(): DEFAULT_JPEG_QUALITY
        metadata=cli("--jpeg-quality", "1-100 (default 85)", parse=int),
    )
    target_shard_bytes: int = field(
        default=1 * GiB,
        metadata=cli(
            "--target-shard-bytes",
            "automatic sharding aims at shards of about this size",
            parse=parse_size,
            metavar="SIZE",
        ),
    )
    memory_budget: int = field(
        default=1 * GiB,
        metadata=cli("--memory-budget", "per shard task", parse=parse_size, metavar="SIZE"),
    )
    min_shards: int = field(
        default=16,
        metadata=cli(
            "--min-shards",
            "automatic sharding keeps at least this many shards, for parallelism",
            parse=int,
        ),
    )
    preshift_bits: int | None = field(
        default=None, metadata=cli("--preshift-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    minishard_bits: int | None = field(
        default=None, metadata=cli("--minishard-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    shard_bits: int | None = field(
        default=None, metadata=cli("--shard-bits", _AUTOMATIC_SHARDING, parse=int)
    )
    hash: str | None = field(
        default=None,
        metadata=cli("--hash", "precomputed sharding hash (default identity)", choices=HASHES),
    )
    shard_shape: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli(
            "--shard-shape",
            "zarr3 shard shape (default: from --target-shard-bytes)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    index_location: str | None = field(
        default=None,  # resolved(): DEFAULT_INDEX_LOCATION
        metadata=cli(
            "--index-location",
            "zarr3 shard index position (default end; start suits stores without suffix "
            "range reads)",
            choices=INDEX_LOCATIONS,
        ),
    )
    zarr_layout: str | None = field(
        default=None,  # resolved(): DEFAULT_ZARR_LAYOUT
        metadata=cli(
            "--zarr-layout",
            "zarr3 layout (default ome: an OME-Zarr 0.5 group, level arrays 0/, 1/, ... with "
            "voxel size, units and, for segmentations, image-label metadata; array: one bare "
            "array at DEST, one level)",
            choices=ZARR_LAYOUTS,
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
    # A precomputed segmentation's meshes / skeletons (the directories its info names),
    # converted to their sharded form in the same job.
    with_meshes: bool = field(
        default=False,
        metadata=cli(
            "--with-meshes",
            "also convert the meshes the segmentation's info names, to sharded meshes",
            switch=True,
        ),
    )
    with_skeletons: bool = field(
        default=False,
        metadata=cli(
            "--with-skeletons",
            "also convert the skeletons the segmentation's info names, to sharded skeletons",
            switch=True,
        ),
    )
    # Legacy single-resolution meshes have no sharded form: re-encode them as one-level
    # multi-resolution Draco meshes only when asked.
    legacy_to_multires: bool = field(
        default=False,
        metadata=cli(
            "--legacy-to-multires",
            "re-encode legacy single-resolution meshes (which have no sharded form) as "
            "multi-resolution Draco meshes with one level of detail",
            switch=True,
        ),
    )
    annotation_type: str | None = field(
        default=None,
        metadata=cli(
            "--annotation-type",
            "a table (.csv, .parquet) becomes precomputed annotations of this type; columns "
            "x,y,z (ax..bz for lines and boxes; x,y,z,rx,ry,rz for ellipsoids) in voxels of "
            "--resolution",
            choices=ANNOTATION_TYPES,
        ),
    )
    relationships: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=cli(
            "--relationship",
            "a relationship NAME whose COLUMN holds each row's segment id (0: none); repeat "
            "for several",
            parse=parse_pair,
            metavar="NAME=COLUMN",
            repeat=True,
        ),
    )
    properties: tuple[str, ...] | None = field(
        default=None,
        metadata=cli(
            "--property",
            "a table column kept as a property; COLUMN=VALUE writes VALUE (a number, or nan) "
            "where it is empty (repeat for several; default: every other numeric column)",
            metavar="COLUMN[=VALUE]",
            repeat=True,
        ),
    )
    enums: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=cli(
            "--enum",
            "a property shown by name: a text COLUMN (its texts become the names) or "
            "COLUMN=VALUE:NAME,... of whole numbers; repeat for several",
            parse=parse_enum,
            metavar="COLUMN[=VALUE:NAME,...]",
            repeat=True,
        ),
    )
    annotation_limit: int = field(
        default=DEFAULT_ANNOTATION_LIMIT,
        metadata=cli(
            "--annotation-limit",
            "annotations per cell of each spatial index level (Neuroglancer shows a sample "
            "of about this many per cell when zoomed out)",
            parse=int,
            metavar="N",
        ),
    )
    segment_properties: str | None = field(
        default=None,
        metadata=cli(
            "--segment-properties",
            "a table (.csv, .parquet: id, then label, description, tags, numbers) written as "
            "the segmentation's segment properties",
            metavar="TABLE",
        ),
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
    source_axes: str | None = field(
        default=None,
        metadata=cli(
            "--source-axes",
            "axis order of an array source: x, y, z, c (channels), t (one time point), e.g. "
            "zyx, xyz, czyx, tczyx (default: its metadata's, else zyx / czyx / tczyx)",
        ),
    )
    source_scale: str | None = field(
        default=None,
        metadata=cli(
            "--source-scale",
            "precomputed scale key, OME-Zarr dataset path or N5 scale (default: the finest)",
        ),
    )
    fill_missing: bool = field(
        default=False,
        metadata=cli(
            "--fill-missing",
            "write the fill value (0) where the source has no chunk (precomputed) or a TIFF "
            "stack skips a slice, instead of refusing; the job counts them",
            switch=True,
        ),
    )
    timeout: float = field(
        default=DEFAULT_TIMEOUT,
        metadata=cli(
            "--timeout",
            "seconds to wait for a store (S3, GCS, HTTP) that does not answer before giving "
            "up, and for each stalled request",
            parse=float,
            metavar="SECONDS",
        ),
    )
    # fsspec options (credentials among them): never shown in reprs, logs or the dashboard.
    storage_options: dict[str, Any] = field(  # the destination's
        default_factory=dict,
        repr=False,
        metadata=cli(
            "--storage-options",
            "fsspec options for the destination (credentials, endpoint_url, ...)",
            parse=parse_json_object,
            metavar="JSON",
        ),
    )
    source_storage_options: dict[str, Any] = field(
        default_factory=dict,
        repr=False,
        metadata=cli(
            "--source-storage-options",
            "options for a gs:// or s3:// source (e.g. an endpoint_url)",
            parse=parse_json_object,
            metavar="JSON",
        ),
    )

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
        check_choice(self, "format", FORMATS, "an output format")
        check_choice(self, "compression", COMPRESSIONS, "a compression", optional=True)
        check_choice(self, "index_location", INDEX_LOCATIONS, "an index location", optional=True)
        check_choice(self, "zarr_layout", ZARR_LAYOUTS, "a zarr layout", optional=True)
        check_choice(self, "engine", ENGINES, "an engine")
        for name, least in (("memory_budget", 16 * MiB), ("target_shard_bytes", 1)):
            if not whole(value := getattr(self, name), least):
                raise OptionError(f"{{{name}}} must be bytes or a size such as 512M, at least "
                                  f"{format_size(least)}", **{name: value})  # fmt: skip
        check_storage_options(self)
        check_numbers(self)
        self.check_objects()
        check_annotations(self)
        if self.downsample is not None and self.downsample not in DOWNSAMPLE_METHODS:
            raise OptionError(
                f"{{downsample}} is not a downsampling method; choose one of {DOWNSAMPLE_METHODS}",
                downsample=self.downsample,
            )
