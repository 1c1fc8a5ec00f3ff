"""The package's version, recorded in every manifest, job record and lease this project writes
(its own module, so the records need not import the package's API to name it), and how to add
its optional parts to the installation at hand."""

import os

__version__ = "0.1.0"

# Extras whose packages build from source (meshoptimizer is published as source only).
NEEDS_A_COMPILER = {"meshes": "a C++ compiler"}


def install_command(extra: str) -> str:
    """The command that adds an optional part (`meshes`, `view`, `gpu-cu13`) to this
    installation: from the clone it runs from, `pip install -e 'CLONE[extra]'`; installed
    from a package index, `pip install 'shardwright[extra]'`."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.exists(os.path.join(root, "pyproject.toml")):
        command = f"pip install -e '{root}[{extra}]'"
    else:
        command = f"pip install 'shardwright[{extra}]'"
    needs = NEEDS_A_COMPILER.get(extra)
    return command + (f" (building it needs {needs})" if needs else "")
