"""Classes a package names but imports on first use: `codecs` and `sources` keep a job (or a
CLI start) from paying for the C libraries (tifffile, h5py, imagecodecs, ...) of the formats it
does not meet. Imports nothing of the project."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_classes(package: str, modules: Mapping[str, str]) -> Callable[[str], type]:
    """The module `__getattr__` of `package`: class name -> the submodule defining it, imported
    when the name is first asked for; the class is then kept in the package, so later lookups
    find it without this function."""

    def __getattr__(name: str) -> type:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        cls: type = getattr(importlib.import_module(f"{package}.{modules[name]}"), name)
        setattr(sys.modules[package], name, cls)
        return cls

    return __getattr__
