"""What every output format of a volume provides at planning: the `VolumeLayout` protocol.

A plan holds one layout (each format's `layout` module in its folder of `formats/`) and asks
it, never which format it is: the metadata documents, the keys of a batch of box shards, the
shards of a scattered (hashed) layout, a pyramid's level layouts, the byte stage applied to
encoded chunks, the plan report's rows. What the engines do per format is the format's
driver's (`planning/formats.py`), so neither planning nor the engines test a format's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from shardwright.planning.pyramid import Triple

if TYPE_CHECKING:
    from shardwright.options import ConvertOptions
    from shardwright.planning.volume import ConversionPlan

Document = tuple[str, dict[str, Any]]  # (key, JSON) of a metadata object


@dataclass(frozen=True)
class ByteStage:
    """What the plan applies to a chunk's encoded bytes before they are stored: a byte codec
    (precomputed `data_encoding`, zarr3 compressor; `codec` None for none) and, in zarr3, a
    crc32c. `host` runs the whole stage on the host (None: the bytes are stored as encoded)."""

    codec: str | None
    level: int | None
    checksum: bool
    host: Callable[[bytes], bytes] | None


@dataclass(frozen=True)
class LevelGeometry:
    """A pyramid level's geometry, as the level planner (`planning/levels.py`) decided it, for
    the layout to describe: chunk grid, sizes in voxels, and the limits on its shard box."""

    level: int
    size: Triple
    chunk_size: Triple
    grid: Triple
    resolution: tuple[float, float, float]
    voxel_offset: Triple
    encoded_chunk_bytes: float
    max_chunks: int | None  # None: as many as the memory budget allows
    step: Triple


class VolumeLayout(Protocol):
    """One volume level's output format, decided."""

    format: ClassVar[str]
    names_companions: ClassVar[bool]  # its metadata can name mesh/skeleton directories
    sharded: ClassVar[bool]  # a task's object is a shard of chunks (else one chunk)
    records_unit: ClassVar[bool]  # its metadata keeps the source's length unit (else nm)

    @property
    def level(self) -> int:
        """Which pyramid level this is (0: the base)."""
        ...

    @property
    def level_key(self) -> str:
        """The level's name in the report and its keys (`8_8_40`; zarr3: `0`)."""
        ...

    @property
    def encodes_jpeg(self) -> bool:
        """Whether any level is stored lossily (a resume cannot compare its voxels)."""
        ...

    def gpu_refusal(self) -> str | None:
        """Why the GPU engine cannot encode this level's chunks (None: it can)."""
        ...

    def byte_stage(self, compression_level: int | None) -> ByteStage: ...

    def box_shard_keys(
        self, starts: np.ndarray, shard_shape: Triple, grid: Triple
    ) -> tuple[list[str], list[int | None]]:
        """Keys (and precomputed shard numbers) of the box shards whose first chunks are the
        rows of `starts` ((N, 3), x, y, z)."""
        ...

    def scattered_shards(self) -> list[tuple[str, int]]:
        """(key, number) of each hashed shard holding a chunk (none where shards are boxes)."""
        ...

    def scattered_chunk_coords(self, shard_number: int, grid: Triple) -> np.ndarray:
        """(N, 3) grid coordinates of the chunks of one hashed shard."""
        ...

    def metadata_documents(self, plan: ConversionPlan) -> list[Document]:
        """Every metadata object of the dataset `plan` is the base of, the root one last."""
        ...

    def plan_level(self, options: ConvertOptions, geometry: LevelGeometry) -> tuple[Triple, Any]:
        """A pyramid level's shard box (chunks) and its part of the format's metadata."""
        ...

    def with_levels(self, parts: list[Any]) -> Sequence[VolumeLayout]:
        """The layouts of every level, this one first, from `plan_level`'s parts."""
        ...

    def renamed(self, keys: dict[str, str]) -> VolumeLayout:
        """This level keyed anew where `keys` (old -> new) names its key (a level that
        replaces one of the same resolution is written beside it, never over it)."""
        ...

    def naming(self, names: dict[str, Any]) -> VolumeLayout:
        """This layout with its metadata naming companion directories (`mesh`, `skeletons`)."""
        ...

    def with_segment_properties(self, document: dict[str, Any]) -> VolumeLayout:
        """This layout with its metadata naming segment properties (`document`), written
        beside it; PlanError where the format has none."""
        ...

    def describe(self, plan: ConversionPlan) -> dict[str, Any]:
        """The format's rows of the plan report."""
        ...

    def describe_level(self) -> dict[str, Any]:
        """The format's rows of a pyramid level in the report."""
        ...
