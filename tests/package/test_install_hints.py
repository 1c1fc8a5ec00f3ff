"""Messages that tell a user to install an optional part name a command that works where
shardwright runs: from a clone, `pip install -e 'CLONE[extra]'` (the package is not on a
package index yet), for an extra the project declares."""

from __future__ import annotations

import pathlib
import re
import tomllib

from shardwright.version import install_command

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ROOT / "src" / "shardwright"


def test_every_extra_a_message_names_is_declared_and_installable_from_this_clone() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = {
        extra
        for path in SOURCES.rglob("*.py")
        for extra in re.findall(r"install_command\(['\"]([\w-]+)['\"]\)", path.read_text())
    }
    assert {"meshes", "view", "gpu-cu13"} <= named
    for extra in named:
        assert extra in declared, extra
        command = install_command(extra)
        assert command.startswith(f"pip install -e '{ROOT}[{extra}]'"), command
    assert "C++ compiler" in install_command("meshes")
    stale = [
        p
        for p in SOURCES.rglob("*.py")
        if p.name != "version.py" and "pip install 'shardwright[" in p.read_text()
    ]
    assert not stale, stale
