"""The output formats as pure bytes: no Dask, no I/O (ARCHITECTURE invariant 7).

One folder per format: `precomputed/` (Neuroglancer precomputed: `info`, sharded v1, Morton
codes, murmurhash, meshes, skeletons) and `zarr3/` (Zarr v3: `zarr.json`, codec chains,
`sharding_indexed` shards, inner chunks, OME-Zarr); each folder's docstring says where its
plan and its engine hooks are. `zarr2.py`: the Zarr v2 arrays of levels added to an
OME-Zarr 0.4 group (no shards: one object per chunk). Shared by both: `shardfile` (a
finished shard as pieces), `spool` (encoded chunks within a budget).
`shardwright.precomputed` and `shardwright.zarr3` are their public faces.
"""
