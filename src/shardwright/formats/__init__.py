"""The output formats as pure bytes: no Dask, no I/O (ARCHITECTURE invariant 7).

Precomputed: `precomputed_info` (the `info` document), `sharding` (sharded v1: spec, builder,
reader), `morton`, `murmurhash`, `meshes`, `skeletons`. Zarr v3: `zarr3_metadata` (the
`zarr.json` document), `zarr3_codecs` (its codec chains), `zarr3_sharding` (`sharding_indexed`
shards), `zarr3_chunks` (the inner-chunk codec chain), `ome_zarr`. Shared: `shardfile` (a
finished shard as pieces), `spool` (encoded chunks within a budget). `shardwright.precomputed`
and `shardwright.zarr3` are their public faces.
"""
