"""Neuroglancer precomputed as pure bytes: `info` (the `info` document), `sharding` (sharded
v1: spec, minishard indexes, builder), `sharded_reader` (chunks by ranged reads), `morton`,
`murmurhash` (shard and chunk names), `meshes`, `skeletons`. `shardwright.precomputed` is its
public face.

Its driver (what planning and the engines ask of it, found by name: `planning/formats.py`):
`layout` (its plan: the `PrecomputedLayout`, the `info`, shard names, chunk encodings, the
options only it takes), `producers` (each engine's step from a task's blocks to its shard),
`driver`.
"""
