"""The output formats, one folder each: its bytes, and its driver.

A format's bytes are pure (no Dask, no I/O: ARCHITECTURE invariant 7): `precomputed/`
(Neuroglancer precomputed: `info`, sharded v1, Morton codes, murmurhash, meshes, skeletons),
`zarr3/` (Zarr v3: `zarr.json`, codec chains, `sharding_indexed` shards, inner chunks,
OME-Zarr), `zarr2/array.py` (the Zarr v2 arrays of levels added to an OME-Zarr 0.4 group: no
shards, one object per chunk). Its driver is three modules in the same folder, above the
planner and the engines: `layout` (its plan), `producers` (each engine's step from a task's
blocks to its object), `driver` (the two, as `planning/formats.py` finds them by the format's
name); the bytes never import them. Shared by all: `shardfile` (a finished shard as pieces),
`spool` (encoded chunks within a budget). `shardwright.precomputed` and `shardwright.zarr3`
are their public faces.
"""
