"""shardwright: convert 3-D volumes to sharded Neuroglancer precomputed and sharded Zarr v3."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["ConvertOptions", "convert", "open_source", "plan", "verify"]

if TYPE_CHECKING:
    from shardwright.api import ConvertOptions, convert, plan, verify
    from shardwright.sources import open_source


def __getattr__(name: str) -> Any:
    """Import the API lazily: `import shardwright.formats...` stays light (no Dask)."""
    if name in ("convert", "ConvertOptions"):
        from shardwright import api

        return getattr(api, name)
    if name == "open_source":
        from shardwright.sources import open_source

        return open_source
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")


class _Package(types.ModuleType):
    """`shardwright.plan` and `shardwright.verify` are API functions that share their names
    with the submodules `plan.py` and `verify.py`. Importing a submodule sets it as an attribute
    of its package, which would hide the function; these properties win over that attribute
    (the submodules stay importable by name: `from shardwright.planning import ...`)."""

    @property
    def plan(self) -> Any:
        from shardwright.api import plan

        return plan

    @plan.setter
    def plan(self, submodule: Any) -> None:
        """The import system's `setattr(package, 'plan', submodule)`: nothing to keep."""

    @property
    def verify(self) -> Any:
        from shardwright.api import verify

        return verify

    @verify.setter
    def verify(self, submodule: Any) -> None:
        """The import system's `setattr(package, 'verify', submodule)`: nothing to keep."""


sys.modules[__name__].__class__ = _Package
