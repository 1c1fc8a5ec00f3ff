"""Verify: check a converted dataset against its manifest, its geometry and its source,
trusting nothing it holds.

- `dataset`: `verify`, the whole check of one destination.
- `state`: the manifest, live leases, retired records, the metadata objects.
- `shards`: the shards the geometry calls for against the manifest and the store's listing;
  each shard's structure, size and crc32c.
- `compare`: decoded chunks against the source's voxels. `objects`: meshes and skeletons.
- `report`: `VerifyReport`, what was found.
"""

from shardwright.verification.dataset import verify
from shardwright.verification.report import VerifyReport

__all__ = ["VerifyReport", "verify"]
