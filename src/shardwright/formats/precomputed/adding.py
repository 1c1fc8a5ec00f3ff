"""What an addition asks of a precomputed volume (`additions/`): its new scales above the
coarsest, planned from that scale as it is stored, and the `info` that names them; meshes,
skeletons and segment properties are named by the info too."""

from __future__ import annotations

import dataclasses
from typing import Any

from shardwright.codecs import CHUNK_ENCODINGS
from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import NAMED, PlanError
from shardwright.formats.precomputed.layout import PrecomputedLayout
from shardwright.formats.precomputed.segment_properties import SEGMENT_PROPERTIES
from shardwright.generation.grid import three
from shardwright.options import ConvertOptions
from shardwright.planning.builder import make_plan
from shardwright.planning.formats import FormatAdding
from shardwright.planning.generated import DIRECTORIES
from shardwright.planning.upper_levels import above_base, level_options, open_level
from shardwright.planning.volume import ConversionPlan
from shardwright.sources.precomputed import own_step
from shardwright.stores import Store


def plan_levels(
    dest: str,
    info: dict[str, Any],
    store: Store,
    options: ConvertOptions,
    replaced: tuple[str, ...],
) -> ConversionPlan:
    """The levels above the coarsest scale the info keeps (less those `replaced`): chunks
    and encoding as that scale's (one shardwright only reads becomes
    compressed_segmentation), sharded; refused where a new scale's key is one the info names
    already or one of the directories beside it."""
    below = without_scales(info, replaced)
    top = below["scales"][-1]
    key = str(top.get("key"))
    base = open_level(dest, key, options)
    # Its own pyramid's step, that of the scales the info keeps: the levels' default factor.
    base.hints = dataclasses.replace(
        base.hints, pyramid_factor=own_step(below["scales"], len(below["scales"]) - 1)
    )
    encoding = str(top.get("encoding", "raw"))
    if encoding not in CHUNK_ENCODINGS:  # compresso, crackle: a segmentation's, read only
        encoding = "compressed_segmentation" if info.get("type") == "segmentation" else "raw"
    block = top.get("compressed_segmentation_block_size")
    chunk = (top.get("chunk_sizes") or [[64, 64, 64]])[0]
    plan = above_base(make_plan(base, dest, level_options(
        options, key, format=OutputFormat.PRECOMPUTED, layer_type=str(info.get("type")),
        encoding=encoding, chunk_size=three(int(c) for c in chunk),
        compressed_segmentation_block_size=(
            three(int(b) for b in block) if encoding == "compressed_segmentation" and block
            else None
        ),
    )), key, base)  # fmt: skip
    taken = {str(s.get("key")) for s in below["scales"]} | {*DIRECTORIES.values(),
                                                               SEGMENT_PROPERTIES}  # fmt: skip
    added = [plan.level_plan(k).layout.level_key for k in range(1, plan.level_count)]
    clash = [k for k in added if k in taken]
    if clash:
        raise PlanError(
            f"{dest}: scale {clash[0]!r} is there already; the levels above {key} would be "
            f"{', '.join(added)}: pass fewer {{mips}} or another {{factor}}",
            mips=NAMED,
            factor=NAMED,
        )
    return plan


def with_levels(
    info: dict[str, Any], levels: ConversionPlan | None, replaced: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The info's `scales` with the added levels' after its own (less those `replaced`)."""
    if levels is None:
        return info
    added = dict(levels.metadata_documents())["info"]["scales"][1:]
    return {**info, "scales": [*without_scales(info, replaced)["scales"], *added]}


def without_scales(info: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The info less the scales `keys` (levels an addition replaces)."""
    return {**info, "scales": [s for s in info["scales"] if str(s.get("key")) not in keys]}


def check_root(info: Any, dest: str) -> None:
    """Refuse an `info` that names no scales: no volume to add to."""
    if not (isinstance(info, dict) and isinstance(info.get("scales"), list)):
        raise PlanError(f"{dest}/info is no precomputed volume's info (no scales)")


ADDING = FormatAdding(
    what=lambda info: f"a precomputed {info.get('type', 'volume')}",
    check_root=check_root,
    plan_levels=plan_levels,
    level_documents=lambda levels: [],  # the info holds its scales
    with_levels=with_levels,
    names_companions=PrecomputedLayout.names_companions,
)
