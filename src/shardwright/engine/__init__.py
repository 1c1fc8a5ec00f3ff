"""Per-shard pipelines: read epochs, split into chunks, encode, assemble, store."""

from shardwright.engine.cpu import run_shard

__all__ = ["run_shard"]
