"""What every plan offers the graph, the lifecycle and the front ends.

Five kinds of plan exist: a volume's (`volume.ConversionPlan`), a directory of meshes or
skeletons' (`objects.ObjectPlan`), meshes or skeletons made from a volume
(`generated.GeneratedPlan`), a table's annotations (`annotations.AnnotationPlan`) and what is
added to a dataset that exists (`addition.AdditionPlan`: its companions are what it writes).
Callers use them through this protocol and branch, where they must, on `dataset`, never on
the class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from shardwright.options import ConvertOptions

__all__ = [
    "ExchangePlan",
    "Plan",
    "ShardOfPlan",
]


class ShardOfPlan(Protocol):
    """One output shard as a plan lists it: its key and how many chunks/objects it holds."""

    @property
    def key(self) -> str: ...

    @property
    def chunk_count(self) -> int: ...


class Plan(Protocol):
    """A decided conversion of one dataset (plus, for a volume, its companion datasets)."""

    @property
    def dataset(self) -> str:
        """A `DatasetKind`: a volume, objects (a directory of meshes or skeletons), generated
        (meshes or skeletons made from the volume), ...: which shard task writes this plan's
        shards."""
        ...

    @property
    def source_url(self) -> str | None:
        """Where the source lies, as the user named it; None for an array in memory."""
        ...

    @property
    def source_bytes(self) -> int:
        """Bytes the job reads from the source (a volume's raw voxels, a directory's objects)."""
        ...

    @property
    def dest(self) -> str: ...

    @property
    def options(self) -> ConvertOptions: ...

    @property
    def companions(self) -> tuple[Plan, ...]:
        """Datasets written by the same job, each below DEST (meshes, skeletons)."""
        ...

    @property
    def shard_count(self) -> int: ...

    @property
    def shard_total(self) -> int:
        """Every shard the job writes for this dataset (a pyramid's, every level's), and its
        preparing tasks: what progress counts."""
        ...

    @property
    def preparing_tasks(self) -> int:
        """Tasks that run before the shards and store none of them (an exchange's partitions
        or blocks); where a job has any, its progress counts tasks, not shards."""
        ...

    @property
    def preparing_unit(self) -> str:
        """What progress calls its preparing tasks: `blocks`, `partitions`."""
        ...

    @property
    def in_place(self) -> bool:
        """Whether it writes inside a dataset that exists, which it also reads (an addition):
        its lease and record are the dataset's, its root written last, its source the
        destination itself."""
        ...

    @property
    def holds_gil(self) -> bool:
        """Whether its tasks hold the GIL for long (meshing and tracing): threads would take
        turns, so a job's own cluster runs them in processes."""
        ...

    @property
    def spools(self) -> bool:
        """Whether its shards are made from spool tasks' output (the exchange): their count
        is an estimate until those ran, and the spools go once every shard is stored."""
        ...

    @property
    def spool_budget(self) -> int:
        """Encoded bytes a shard task keeps in memory before spilling to local disk."""
        ...

    def shards(self) -> Iterator[Any]:
        """Every non-empty shard (a `ShardOfPlan`), generated lazily in a fixed order."""
        ...

    def for_shard_tasks(self) -> Plan:
        """The plan as each shard task needs it (companions and per-shard data dropped)."""
        ...

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        """Every metadata object (key, JSON), the root one last."""
        ...

    def describe(self) -> dict[str, Any]: ...

    def report(self) -> str: ...


class ExchangePlan:
    """What the plans whose shards are made from spools under DEST/.shardwright/exchange/
    (generated meshes and skeletons, a table's annotations) take from their options as
    they are: the budget, the compression level, how shard tasks reach the spools."""

    options: ConvertOptions

    @property
    def spool_budget(self) -> int:
        return self.options.budget.spool()

    @property
    def compression_level(self) -> int | None:
        return self.options.compression_level

    @property
    def exchange_storage_options(self) -> dict[str, Any]:
        """How shard tasks reach the spools (they lie below DEST)."""
        return dict(self.options.storage_options)
