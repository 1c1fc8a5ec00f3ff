"""Precomputed annotations as neuroglancer's own reader (`AnnotationReader`, TensorStore
underneath) reads them: records of every kind with properties of every size, related
segments, sharded uint64 and spatial indexes, and a spatial index of several levels that
holds every annotation once and answers box queries exactly.

The collections are assembled here from the format's parts (formats/annotations.py,
formats/annotation_spatial.py) and the sharded format; the job that writes them from tables
is tested end to end elsewhere."""

from __future__ import annotations

import json
import pathlib
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from neuroglancer.read_precomputed_annotations import AnnotationReader

from shardwright.errors import FormatError
from shardwright.formats import annotation_spatial as spatial
from shardwright.formats.annotations import (
    AnnotationProperty,
    AnnotationSchema,
    encode_multiple,
    encode_single,
)
from shardwright.formats.morton import compressed_morton_code
from shardwright.formats.sharding import ShardingSpec

SHARDING = ShardingSpec(
    preshift_bits=0, hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1,
    minishard_index_encoding="gzip", data_encoding="gzip",
)  # fmt: skip
PROPERTIES = (
    AnnotationProperty("tag", "uint8", enum_values=(0, 1, 2), enum_labels=("a", "b", "c")),
    AnnotationProperty("score", "float32", description="confidence"),
    AnnotationProperty("color", "rgb"),
    AnnotationProperty("count", "int16"),
)


def _bounds(kind: str, geometry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if kind == "point":
        return geometry, geometry
    if kind == "ellipsoid":
        return geometry[:, :3] - geometry[:, 3:], geometry[:, :3] + geometry[:, 3:]
    a, b = geometry[:, :3], geometry[:, 3:]
    return np.minimum(a, b), np.maximum(a, b)


def _write_sharded(folder: pathlib.Path, items: dict[int, bytes]) -> None:
    folder.mkdir(parents=True)
    for name, data in SHARDING.encode_shards(items).items():
        (folder / name).write_bytes(data)


def _collection(
    root: pathlib.Path,
    schema: AnnotationSchema,
    ids: np.ndarray,
    geometry: np.ndarray,
    values: dict[str, np.ndarray],
    related: dict[str, list[np.ndarray]],
    limit: int,
) -> list[float]:
    """Writes the collection; returns the spatial levels' chances."""
    low, high = _bounds(schema.kind, geometry)
    lower = np.floor(low.min(axis=0))
    upper = np.floor(high.max(axis=0)) + 1
    levels = spatial.spatial_levels(lower, upper)

    def most(index: int, decided: list[float]) -> int:
        part = spatial.remaining_counts(ids, low, high, lower, levels[index], decided)
        return spatial.most_in_a_cell([part])

    chances = spatial.decide_chances(levels, limit, most)
    stored_at = spatial.emission_levels(ids, chances)
    records = schema.records(geometry, values)
    _write_sharded(root / "by_id", {
        int(i): encode_single(records[n], [related[r][n] for r in schema.relationships])
        for n, i in enumerate(ids.tolist())
    })  # fmt: skip
    relationship_entries = []
    for name in schema.relationships:
        members: dict[int, list[int]] = defaultdict(list)
        for n, segments in enumerate(related[name]):
            for segment in np.unique(segments).tolist():
                members[segment].append(n)
        _write_sharded(root / f"rel_{name}", {
            segment: encode_multiple(records[rows], ids[rows]) for segment, rows in members.items()
        })  # fmt: skip
        relationship_entries.append({"key": f"rel_{name}", "sharding": SHARDING.to_json()})
    spatial_entries = []
    for index, _ in enumerate(chances):
        level = levels[index]
        rows = np.flatnonzero(stored_at == index)
        start, stop = spatial.cell_ranges(low[rows], high[rows], lower, level)
        owner, cells = spatial.cells_met(start, stop)
        codes = compressed_morton_code(cells, level.grid_shape)
        cells_items: dict[int, bytes] = {}
        for code in np.unique(codes).tolist():
            members_ = rows[owner[codes == code]]
            members_ = members_[np.argsort(spatial.draws(ids[members_], 99))]  # "randomly"
            cells_items[code] = encode_multiple(records[members_], ids[members_])
        _write_sharded(root / f"spatial{index}", cells_items)
        spatial_entries.append({
            "key": f"spatial{index}", "sharding": SHARDING.to_json(),
            "grid_shape": list(level.grid_shape), "chunk_size": list(level.chunk_size),
            "limit": limit,
        })  # fmt: skip
    info = schema.info((8, 8, 40), lower, upper, {"key": "by_id", "sharding": SHARDING.to_json()},
                       relationship_entries, spatial_entries)  # fmt: skip
    (root / "info").write_text(json.dumps(info))
    return chances


def _table(kind: str, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(2**62, 2**64 - 1, count, dtype=np.uint64))  # beyond int64
    rng.shuffle(ids)
    centres = rng.uniform(0, [500, 400, 60], (count, 3)).astype(np.float32)
    if kind == "point":
        geometry = centres
    elif kind == "ellipsoid":
        geometry = np.hstack([centres, rng.uniform(0.5, 6, (count, 3)).astype(np.float32)])
    else:
        geometry = np.hstack([centres, centres + rng.uniform(-8, 8, (count, 3)).astype(np.float32)])
    values = {
        "tag": rng.integers(0, 3, count).astype(np.uint8),
        "score": rng.random(count).astype(np.float32),
        "color": rng.integers(0, 256, (count, 3)).astype(np.uint8),
        "count": rng.integers(-300, 300, count).astype(np.int16),
    }
    return ids, geometry, values


@pytest.mark.parametrize("kind", ["point", "line", "axis_aligned_bounding_box", "ellipsoid"])
def test_every_index_reads_back_exactly_with_neuroglancers_reader(
    tmp_path: pathlib.Path, kind: str
) -> None:
    ids, geometry, values = _table(kind, 3000, seed=len(kind))
    rng = np.random.default_rng(1)
    related = {
        "pre": [np.array([s], np.uint64) for s in rng.integers(1, 40, ids.size)],
        "post": [rng.integers(1, 40, rng.integers(0, 4)).astype(np.uint64) for _ in ids],
    }
    schema = AnnotationSchema(kind, PROPERTIES, ("pre", "post"))
    chances = _collection(tmp_path, schema, ids, geometry, values, related, limit=100)
    assert len(chances) > 2 and chances[0] < 0.2 and chances[-1] == 1.0
    reader = AnnotationReader(f"file://{tmp_path}/")
    assert [p.id for p in reader.properties] == ["score", "count", "tag", "color"]

    for n in np.random.default_rng(2).choice(ids.size, 60, replace=False).tolist():
        got = reader.by_id[int(ids[n])].to_json()
        if kind == "point":
            np.testing.assert_array_equal(got["point"], geometry[n])
        elif kind == "ellipsoid":
            np.testing.assert_array_equal(got["center"] + got["radii"], geometry[n])
        else:
            np.testing.assert_array_equal(got["pointA"] + got["pointB"], geometry[n])
        expected = [values[p.id][n].tolist() for p in reader.properties]
        props = [p.tolist() if hasattr(p, "tolist") else p for p in got["props"]]
        assert props[:2] == pytest.approx(expected[:2]) and props[2] == expected[2]
        assert got["segments"] == [[int(s) for s in related[r][n]] for r in ("pre", "post")]

    for segment in (1, 7, 39):
        for name in ("pre", "post"):
            found = sorted(int(a.id) for a in reader.relationships[name][segment])
            assert found == sorted(int(ids[n]) for n, s in enumerate(related[name])
                                   if segment in s.tolist())  # fmt: skip

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

    chances = spatial.decide_chances(levels, 500, most)
    stored = spatial.emission_levels(ids, chances)
    assert 400 < np.count_nonzero(stored == 0) < 600
    assert np.bincount(stored).sum() == ids.size and chances[-1] == 1.0
    first = points[stored == 0]  # uniform over the volume: each octant about an eighth
    octants = np.bincount((first >= 500).astype(int) @ [1, 2, 4], minlength=8)
    assert octants.min() > first.shape[0] / 8 * 0.5


def test_a_schema_refuses_what_neuroglancer_cannot_read() -> None:
    with pytest.raises(FormatError, match="must start with a lowercase letter"):
        AnnotationProperty("Score", "float32")
    with pytest.raises(FormatError, match="unknown type"):
        AnnotationProperty("score", "float64")
    with pytest.raises(FormatError, match="3 enum values but 2 labels"):
        AnnotationProperty("tag", "uint8", enum_values=(0, 1, 2), enum_labels=("a", "b"))
    with pytest.raises(FormatError, match="unknown annotation type"):
        AnnotationSchema("polygon")
