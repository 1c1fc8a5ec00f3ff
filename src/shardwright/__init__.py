"""shardwright: convert 3-D volumes to sharded Neuroglancer precomputed and sharded Zarr v3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["ConvertOptions", "convert", "open_source", "plan", "verify"]

if TYPE_CHECKING:
    from shardwright.api import ConvertOptions, convert, plan, verify
    from shardwright.sources import open_source


def __getattr__(name: str) -> Any:
    """Import the API lazily: `import shardwright.formats...` stays light (no Dask)."""
    if name in ("convert", "plan", "verify", "ConvertOptions"):
        from shardwright import api

        return getattr(api, name)
    if name == "open_source":
        from shardwright.sources import open_source

        return open_source
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
