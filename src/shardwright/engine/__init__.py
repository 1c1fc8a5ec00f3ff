"""Shard tasks: one skeleton (`shard_task`) and a producer per engine and shard kind.

Volume shards: `cpu` (streaming, the oracle) and `batched` (over numpy or CuPy; `gpu` runs it on
CUDA workers). Pyramid level shards: `pyramid`; mesh and skeleton shards: `objects`.
"""

from shardwright.engine.cpu import run_shard

__all__ = ["run_shard"]
