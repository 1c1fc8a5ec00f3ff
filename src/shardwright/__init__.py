"""shardwright: convert 3-D volumes to sharded Neuroglancer precomputed and sharded Zarr v3."""

__version__ = "0.1.0"
