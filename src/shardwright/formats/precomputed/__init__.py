"""Neuroglancer precomputed as pure bytes: `info` (the `info` document), `sharding` (sharded
v1: spec, minishard indexes, builder), `sharded_reader` (chunks by ranged reads), `morton`,
`murmurhash` (shard and chunk names), `meshes`, `skeletons`. `shardwright.precomputed` is its
public face.

Where the rest of the format lives: its plan, the `PrecomputedLayout`
(`shardwright.planning.layouts.precomputed`: the `info`, shard names, chunk encodings); the
engines' hooks, the `LayoutVisitor.precomputed` methods (`shardwright.planning.layouts.base`):
`CpuProducer.precomputed` (`shardwright.engine.cpu`) and `BatchedProducer.precomputed`
(`shardwright.engine.batched`).
"""
