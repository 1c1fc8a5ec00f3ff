"""Names a package shows but imports on first use: the top-level package keeps `import
shardwright` (and so every CLI start) from importing the API's NumPy and Dask, and `codecs` and
`sources` keep a job (or a CLI start) from paying for the C libraries (tifffile, h5py,
imagecodecs, ...) of the formats it does not meet. Imports nothing of the project."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: name -> the submodule (relative to `package`)
    defining it, imported when the name is first asked for; a name mapped to itself is that
    submodule. The value is then kept in the package, so later lookups find it without this
    function."""

    def __getattr__(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{modules[name]}")
        value = module if modules[name] == name else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
