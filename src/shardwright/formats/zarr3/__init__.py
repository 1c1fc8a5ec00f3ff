"""Zarr v3 as pure bytes: `metadata` (the `zarr.json` document), `codecs` (its codec chains),
`chunks` (the inner-chunk codec chain), `sharding` (`sharding_indexed` shards), `ome_zarr`
(the multiscales group). `shardwright.zarr3` is its public face.

Where the rest of the format lives: its plan, the `Zarr3Layout`
(`shardwright.planning.layouts.zarr3`: array metadata, shard keys, the OME-Zarr group); the
engines' hooks, the `LayoutVisitor.zarr3` methods (`shardwright.planning.layouts.base`):
`CpuProducer.zarr3` (`shardwright.engine.cpu`) and `BatchedProducer.zarr3`
(`shardwright.engine.batched`).
"""
