"""The output formats' drivers, found by name: a format is its folder of `formats/` and its
member of `OutputFormat` (the registry: `driver(name)` imports `formats/<name>/driver.py`).

A driver is what planning and the engines ask of a format beyond its bytes: the conversion's
part of planning (`FormatPlanner`: its plan from the decided geometry, the options only it
takes, which every other format refuses, its checks of them, its default chunk encoding; none
for `zarr2`, which only the levels added to an OME-Zarr 0.4 group take, planned from the array
they are reduced from) and each engine's step that turns a task's blocks into its object
(`cpu_shard`, `batched_shard`), what verify asks of a dataset in the format, from its
metadata documents (`FormatReader`, in `formats/<name>/verifying.py`), and what an addition
asks of a dataset in it that exists (`FormatAdding`, in `formats/<name>/adding.py`: its
levels above the coarsest, the metadata naming them). The drivers import the planner, the
engines and verify's checks; they are imported by name, when first asked for, so that none
imports them back.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardwright.common.vocabulary import OutputFormat
from shardwright.options import FORMATS
from shardwright.planning import checks

if TYPE_CHECKING:
    import numpy as np

    from shardwright.formats.shardfile import ShardFile
    from shardwright.options import ConvertOptions
    from shardwright.planning.geometry import Geometry
    from shardwright.planning.volume import ConversionPlan
    from shardwright.sources import Source
    from shardwright.stores import Store
    from shardwright.verification.placement import Expected
    from shardwright.verification.report import VerifyReport
    from shardwright.verification.shards import Dataset

# One engine's step for one format: (the engine's producer, the plan's layout) -> the task's
# object, or None where zarr stores none (every chunk the fill value). The producers are the
# engines' (`engine/cpu.CpuProducer`, `engine/batched.BatchedProducer`), below the drivers.
ShardStep = Callable[[Any, Any], "ShardFile | None"]


@dataclass(frozen=True)
class FormatPlanner:
    """A conversion format's part of planning."""

    plan_volume: Callable[[Geometry], ConversionPlan]
    own_options: tuple[str, ...]  # options only this format takes
    check_options: Callable[[ConvertOptions], None]  # its checks of what it takes
    default_encoding: Callable[[str, np.dtype], str]  # of a layer type and data type
    check_encoding: Callable[[ConvertOptions, str], None]  # once the encoding is decided


@dataclass(frozen=True)
class FormatReader:
    """What verify asks of a dataset in a format (ours or another tool's), from its metadata
    documents: the one that names the format, whether any level is sharded, the shards its
    geometry names with how to check and read them (None: the format has no shards), the
    further documents one names (an OME-Zarr group's level arrays'), its levels' keys
    (finest first), the objects a dataset of the format holds beside its document, the check
    of where it places the volume against where it should (None: it records none), the
    documents of levels that are arrays of their own, by their keys, and, for a dataset of
    unsharded chunks read as a volume, the chunk box its finest level is read in (None: the
    default) and whether its chunks are lossy, and whether its documents place the volume
    (a bare zarr array's do not)."""

    metadata_key: str  # info, zarr.json, .zattrs
    holds_shards: Callable[[dict[str, Any]], bool]
    dataset: Callable[[Store, dict[str, Any]], Dataset] | None
    linked: Callable[[Any], list[str]]
    levels: Callable[[dict[str, Any]], list[str]]
    beside: tuple[str, ...] = ()
    check_placement: Callable[[VerifyReport, dict[str, Any], Expected, Source], None] | None = None
    level_documents: Callable[[list[str]], list[str]] = lambda levels: []
    chunk_reading: Callable[[dict[str, Any]], tuple[list[int] | None, bool]] = (
        lambda documents: (None, False)  # the default chunk box, not lossy
    )
    places_volume: Callable[[dict[str, Any]], bool] = lambda documents: True

    @property
    def has_shards(self) -> bool:
        """Whether the format stores shards (else one object per chunk)."""
        return self.dataset is not None

    def documents(self, levels: list[str]) -> list[str]:
        """Every metadata document a dataset of the format with these levels holds."""
        return [self.metadata_key, *self.level_documents(levels)]


@dataclass(frozen=True)
class FormatAdding:
    """What an addition asks of a dataset of the format that exists, from its root (the
    metadata document written last, naming what was added): the dataset in the plan's words,
    the refusal of a root that is not one to add to, the levels above its coarsest (less
    those `replaced`, shardwright's, its last), the documents of those levels written before
    the root names them, the root naming them (`with_levels`: less the levels replaced), and
    whether the root can name meshes, skeletons and segment properties beside it."""

    what: Callable[[dict[str, Any]], str]
    check_root: Callable[[Any, str], None]  # (the root parsed, the dataset's location)
    # (location, root, its store, the options, the levels replaced) -> the levels' pyramid
    plan_levels: Callable[[str, dict[str, Any], Store, ConvertOptions, tuple[str, ...]],
                          ConversionPlan]  # fmt: skip
    level_documents: Callable[[ConversionPlan], list[tuple[str, dict[str, Any]]]]
    with_levels: Callable[[dict[str, Any], ConversionPlan | None, tuple[str, ...]], dict[str, Any]]
    names_companions: bool


@dataclass(frozen=True)
class FormatDriver:
    """An output format's parts beyond its bytes (`formats/<name>/driver.py`'s `DRIVER`)."""

    planner: FormatPlanner | None  # None: never a conversion's --format
    cpu_shard: ShardStep
    batched_shard: ShardStep
    reader: FormatReader
    adding: FormatAdding | None = None  # None: shardwright adds nothing to its datasets


@functools.cache
def driver(name: str) -> FormatDriver:
    """The driver of the output format `name` (a member of `OutputFormat`)."""
    found: FormatDriver = importlib.import_module(f"shardwright.formats.{name}.driver").DRIVER
    return found


def readers() -> list[tuple[str, FormatReader]]:
    """Every format's reader, in `OutputFormat`'s order (the order a dataset's metadata
    documents are looked for in)."""
    return [(name, driver(name).reader) for name in OutputFormat]


def reader_of(documents: Mapping[str, Any]) -> tuple[str, FormatReader] | None:
    """The format whose metadata document is among `documents` (keyed by name), with its
    reader; None where no format's is."""
    return next(((n, r) for n, r in readers() if r.metadata_key in documents), None)


def conversion_formats() -> dict[str, FormatPlanner]:
    """Each format a conversion may write (`--format`), with its planner."""
    planners = {name: driver(name).planner for name in FORMATS}
    return {name: planner for name, planner in planners.items() if planner is not None}


def check_options_for_format(options: ConvertOptions) -> None:
    """Refuse the options the chosen format would ignore (another format's own), then what
    it refuses of its own, so that what the user asked for is honoured or refused, never
    dropped."""
    formats = conversion_formats()
    chosen = formats[options.format]
    for name, other in formats.items():
        if name != options.format:
            ignored = [o for o in other.own_options if o not in chosen.own_options]
            checks.refuse_given(options, ignored, f"{name} output; {options.format} output "
                                "ignores it")  # fmt: skip
    chosen.check_options(options)
    checks.check_compression_level(options)
