"""shardwright: convert 3-D volumes to sharded Neuroglancer precomputed and sharded Zarr v3.

The API a notebook uses, the same the command line calls:

- `plan(source, dest, **options)`: decide a conversion and print nothing, write nothing.
- `convert(source_or_plan, dest, **options)`: run it as one Dask job; returns its `Manifest`.
- `verify(dest, against=None)`: check a converted dataset, trusting nothing it holds.
- `status(dest)`: where the job writing `dest` stands, as `shardwright status` says it.
- `open_source(url)`: a volume source as shardwright reads it.
- `view(*datasets)`: serve datasets with the Neuroglancer client; `.url` shows them all.
- `precomputed`, `zarr3`: the two output formats, usable alone (bytes in, bytes out).
- `ConvertOptions`: every option of a conversion; `errors`: what shardwright raises.
"""

from typing import TYPE_CHECKING

from shardwright import errors
from shardwright.common.lazy import lazy_attributes
from shardwright.version import __version__

if TYPE_CHECKING:
    from shardwright import precomputed, zarr3
    from shardwright.api import (
        ConvertOptions,
        Manifest,
        add_segment_properties,
        convert,
        plan,
        status,
        verify,
        view,
    )
    from shardwright.sources import open_source

__all__ = [
    "ConvertOptions",
    "Manifest",
    "__version__",
    "add_segment_properties",
    "convert",
    "errors",
    "open_source",
    "plan",
    "precomputed",
    "status",
    "verify",
    "view",
    "zarr3",
]

# The API imports NumPy and Dask: loaded on first use, so `import shardwright` (and a CLI
# start that needs none of it, `--help`) stays quick. Name -> the submodule defining it.
__getattr__ = lazy_attributes(__name__, {
    "ConvertOptions": "api", "Manifest": "api", "add_segment_properties": "api",
    "convert": "api", "plan": "api", "status": "api",
    "verify": "api", "view": "api", "open_source": "sources", "precomputed": "precomputed",
    "zarr3": "zarr3",
})  # fmt: skip


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
