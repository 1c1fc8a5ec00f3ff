"""Zarr v3 as pure bytes: `metadata` (the `zarr.json` document), `codecs` (its codec chains),
`chunks` (the inner-chunk codec chain), `sharding` (`sharding_indexed` shards), `ome_zarr`
(the multiscales group). `shardwright.zarr3` is its public face.

Its driver (what planning and the engines ask of it, found by name: `planning/formats.py`):
`layout` (its plan: the `Zarr3Layout`, array metadata, shard keys, the OME-Zarr group, the
options only it takes), `producers` (each engine's step from a task's blocks to its shard),
`driver`.
"""
