"""Precomputed annotations as neuroglancer's own reader (`AnnotationReader`, TensorStore
underneath) reads them: records of every kind with properties of several sizes, related
segments, sharded uint64 and spatial indexes, and a spatial index of several levels that
holds every annotation once and answers box queries exactly.

The collections are made here from a table's partitions by the job's parts (the rows each
partition sends to each output's shards, engine/annotation_rows.py; each shard's entries)
and the sharded format; the job around them is tested end to end elsewhere."""

from __future__ import annotations

import json
import pathlib
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from neuroglancer.read_precomputed_annotations import AnnotationReader

from shardwright.engine.annotation_rows import partition_sections, shard_entries
from shardwright.errors import FormatError
from shardwright.formats.precomputed import annotation_spatial as spatial
from shardwright.formats.precomputed.annotations import (
    KINDS,
    AnnotationProperty,
    AnnotationSchema,
    bounding_boxes,
)
from shardwright.formats.precomputed.sharding import ShardingSpec, packed_shard
from shardwright.planning.annotations import AnnotationLayout
from shardwright.sources.tables import annotation_columns

SHARDING = ShardingSpec(
    preshift_bits=0, hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1,
    minishard_index_encoding="gzip", data_encoding="gzip",
)  # fmt: skip
RELATED = {"pre": "pre", "post": "post"}


def _collection(root: pathlib.Path, kind: str, frame: pd.DataFrame, limit: int) -> list[float]:
    """Writes the table's collection from three partitions; returns the levels' chances."""
    columns = annotation_columns(dict(frame.dtypes.items()), kind, "t", RELATED)
    schema = AnnotationSchema(kind, tuple(p for _, p in columns.properties), tuple(RELATED))
    ids = frame["id"].to_numpy(np.uint64)
    low, high = bounding_boxes(kind, frame[list(KINDS[kind][1])].to_numpy())
    lower, upper = np.floor(low.min(axis=0)), np.floor(high.max(axis=0)) + 1
    levels = spatial.spatial_levels(lower, upper)

    def most(index: int, decided: list[float]) -> int:
        part = spatial.remaining_counts(ids, low, high, lower, levels[index], decided)
        return spatial.most_in_a_cell([part])

    chances, _ = spatial.decide_chances(levels, limit, most)
    outputs = 1 + len(RELATED) + len(chances)
    layout = AnnotationLayout(schema, columns, tuple(lower), tuple(levels[: len(chances)]),
                              tuple(chances), (SHARDING,) * outputs)  # fmt: skip
    sections: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    for first in range(0, len(frame), 1000):
        for where, parts in partition_sections(layout, frame[first : first + 1000], first).items():
            sections[where].extend(parts)
    for (output, shard), parts in sorted(sections.items()):
        stored = packed_shard(SHARDING, shard, *shard_entries(layout, output, parts))
        folder = root / layout.key(output)
        folder.mkdir(exist_ok=True)
        (folder / stored.name).write_bytes(stored.to_bytes())
    entry = {"sharding": SHARDING.to_json()}
    info = schema.info(
        (8, 8, 40), lower, upper, {"key": "by_id", **entry},
        [{"key": layout.key(1 + n), **entry} for n in range(len(RELATED))],
        [{"key": layout.key(layout.first_spatial + n), **entry, "limit": limit,
          "grid_shape": list(level.grid_shape), "chunk_size": list(level.chunk_size)}
         for n, level in enumerate(layout.levels)],
    )  # fmt: skip
    (root / "info").write_text(json.dumps(info))
    return chances


def _table(kind: str, count: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(2**62, 2**64 - 1, count, dtype=np.uint64))  # beyond int64
    rng.shuffle(ids)
    count = ids.size
    centres = rng.uniform(0, [500, 400, 60], (count, 3)).astype(np.float32)
    if kind == "point":
        geometry = centres
    elif kind == "ellipsoid":
        geometry = np.hstack([centres, rng.uniform(0.5, 6, (count, 3)).astype(np.float32)])
    else:
        geometry = np.hstack([centres, centres + rng.uniform(-8, 8, (count, 3)).astype(np.float32)])
    frame = pd.DataFrame(geometry, columns=list(KINDS[kind][1]))
    frame["id"] = ids
    frame["pre"] = rng.integers(1, 40, count).astype(np.uint64)
    frame["post"] = rng.integers(0, 40, count).astype(np.uint64)  # 0: no segment
    frame["tag"] = rng.integers(0, 3, count).astype(np.uint8)
    frame["score"] = rng.random(count).astype(np.float32)
    frame["count"] = rng.integers(-300, 300, count).astype(np.int16)
    return frame


@pytest.mark.parametrize("kind", ["point", "line", "axis_aligned_bounding_box", "ellipsoid"])
def test_every_index_reads_back_exactly_with_neuroglancers_reader(
    tmp_path: pathlib.Path, kind: str
) -> None:
    frame = _table(kind, 3000, seed=len(kind))
    chances = _collection(tmp_path, kind, frame, limit=100)
    assert len(chances) > 2 and chances[0] < 0.2 and chances[-1] == 1.0
    reader = AnnotationReader(f"file://{tmp_path}/")
    assert [p.id for p in reader.properties] == ["score", "count", "tag"]
    ids = frame["id"].to_numpy(np.uint64)
    geometry = frame[list(KINDS[kind][1])].to_numpy(np.float32)

    for n in np.random.default_rng(2).choice(ids.size, 60, replace=False).tolist():
        got = reader.by_id[int(ids[n])].to_json()
        if kind == "point":
            np.testing.assert_array_equal(got["point"], geometry[n])
        elif kind == "ellipsoid":
            np.testing.assert_array_equal(got["center"] + got["radii"], geometry[n])
        else:
            np.testing.assert_array_equal(got["pointA"] + got["pointB"], geometry[n])
        expected = [frame[p.id].iloc[n].item() for p in reader.properties]
        assert [float(v) for v in got["props"]] == pytest.approx(expected)
        post = int(frame["post"].iloc[n])
        assert got["segments"] == [[int(frame["pre"].iloc[n])], [post] if post else []]

    for segment in (1, 7, 39):
        for name in RELATED:
            found = sorted(int(a.id) for a in reader.relationships[name][segment])
            assert found == sorted(ids[frame[name].to_numpy() == segment].tolist())
    assert 0 not in reader.relationships["post"]  # segment 0 (background) relates nothing

    everything = [int(a.id) for a in reader.get_within_spatial_bounds()]
    assert set(everything) == set(ids.tolist())
    if kind == "point":
        assert len(everything) == ids.size  # each annotation stored once, in one cell
        box_low, box_high = np.array([100, 50, 10]), np.array([260, 300, 35])
        inside = ((geometry >= box_low) & (geometry < box_high)).all(axis=1)
        found = [int(a.id) for a in reader.get_within_spatial_bounds(
            lower_bound=box_low, upper_bound=box_high)]  # fmt: skip
        assert sorted(found) == sorted(ids[inside].tolist())


def test_the_coarse_levels_hold_a_uniform_sample_near_the_limit() -> None:
    """100,000 points, limit 500: level 0 (one cell) holds about 500, each level its share,
    and every point is stored at exactly one level."""
    rng = np.random.default_rng(3)
    ids = np.arange(1, 100_001, dtype=np.uint64)
    points = rng.uniform(0, 1000, (ids.size, 3))
    levels = spatial.spatial_levels([0, 0, 0], [1000, 1000, 1000])

    def most(index: int, decided: list[float]) -> int:
        return spatial.most_in_a_cell(
            [spatial.remaining_counts(ids, points, points, [0, 0, 0], levels[index], decided)]
        )

    chances, limits = spatial.decide_chances(levels, 500, most)
    stored = spatial.emission_levels(ids, chances)
    assert 400 < np.count_nonzero(stored == 0) < 600
    assert np.bincount(stored).sum() == ids.size and chances[-1] == 1.0
    first = points[stored == 0]  # uniform over the volume: each octant about an eighth
    octants = np.bincount((first >= 500).astype(int) @ [1, 2, 4], minlength=8)
    assert octants.min() > first.shape[0] / 8 * 0.5
    # Each level's limit as the info states it: the sampled levels' target, and the fullest
    # cell of the level that stores all that remains, exactly.
    assert limits[:-1] == [500] * (len(limits) - 1)
    last = points[stored == len(chances) - 1]
    start, _ = spatial.cell_ranges(last, last, [0, 0, 0], levels[len(chances) - 1])
    cells = spatial.flat_cells(start, levels[len(chances) - 1])
    assert limits[-1] == np.unique(cells, return_counts=True)[1].max() < 500


def test_a_schema_refuses_what_neuroglancer_cannot_read() -> None:
    with pytest.raises(FormatError, match="must start with a lowercase letter"):
        AnnotationProperty("Score", "float32")
    with pytest.raises(FormatError, match="unknown type"):
        AnnotationProperty("score", "float64")
    with pytest.raises(FormatError, match="3 enum values but 2 labels"):
        AnnotationProperty("tag", "uint8", enum_values=(0, 1, 2), enum_labels=("a", "b"))
    with pytest.raises(FormatError, match="unknown annotation type"):
        AnnotationSchema("polygon")
