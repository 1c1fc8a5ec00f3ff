"""Pyramid levels an addition puts above a dataset's coarsest level, whatever its format:
which levels shardwright added before they replace (`--overwrite`, or the stopped addition
that did), planned by the dataset's format (`FormatAdding.plan_levels`, on
`planning/upper_levels.py`), keyed anew where a level replaces one of the same name, and
refused where their folders hold objects shardwright did not write.

Where the dataset also gains meshes or skeletons made from the level the levels are reduced
from (a segmentation of one scale), the meshes' block tasks are the levels' base tasks: each
reduces its block's core as it reads it and hands the pieces to the first new level's tasks
(`planning/feeding.py`: a task makes a group of blocks), so the volume is read once for all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardwright.additions.checks import check_level_places
from shardwright.lifecycle.addition import added_levels, read_additions, read_record
from shardwright.options import ConvertOptions
from shardwright.planning.formats import FormatAdding, FormatReader
from shardwright.planning.volume import ConversionPlan
from shardwright.stores import Store


def plan_added_levels(
    store: Store,
    dest: str,
    parts: tuple[FormatReader, FormatAdding],
    root: dict[str, Any],
    options: ConvertOptions,
    overwrite: bool,
) -> tuple[ConversionPlan, tuple[str, ...]]:
    """The levels the options ask above the coarsest of the dataset whose root (metadata
    document) is `root`, by its format's `parts` (its reader and its additions' part), and the
    levels shardwright added that they replace (`overwrite`, or as the stopped addition
    did)."""
    reader, adding = parts
    keys = reader.levels(root)
    replaced: tuple[str, ...] = ()
    if overwrite or _replacing(store):
        made = added_levels(read_additions(store))
        replaced = tuple(key for key in keys if key in made)
    pyramid = adding.plan_levels(dest, root, store, options, replaced)
    pyramid = _renamed_levels(pyramid, _new_keys(store, _level_keys(pyramid), replaced, set(keys)))
    check_level_places(store, dest, _level_keys(pyramid))
    return pyramid, replaced


def _renamed_levels(levels: ConversionPlan, keys: dict[str, str]) -> ConversionPlan:
    """The pyramid with its new levels keyed anew where `keys` (old -> new) says: a level
    that replaces one of the same resolution is written beside it, never over it, while the
    metadata still names the old one."""
    if not keys:
        return levels

    def renamed(plan: ConversionPlan) -> ConversionPlan:
        return dataclasses.replace(plan, layout=plan.layout.renamed(keys))

    upper = tuple(renamed(level) for level in levels.upper)
    return dataclasses.replace(renamed(levels), upper=upper)


def _level_keys(levels: ConversionPlan) -> list[str]:
    """The keys (folders) of the levels a pyramid adds above its base."""
    return [levels.level_plan(k).layout.level_key for k in range(1, levels.level_count)]


def _replacing(store: Store) -> bool:
    """Whether the addition stopped here replaced levels (its resume does the same)."""
    record = read_record(store)
    return record is not None and bool(record.fingerprint.get("replaces"))


def _new_keys(
    store: Store, keys: list[str], replaced: tuple[str, ...], taken: set[str]
) -> dict[str, str]:
    """New keys for the levels whose key is one they replace: the first of `KEY-2`,
    `KEY-3`, ... that the metadata does not name (`taken`) and no object is under."""
    renames: dict[str, str] = {}
    for key in keys:
        if key not in replaced:
            continue
        n = 2
        while f"{key}-{n}" in taken or store.list_keys(f"{key}-{n}"):
            n += 1
        renames[key] = f"{key}-{n}"
    return renames
