"""Whether a headless browser can render here: the browser tests skip, saying what is
missing, where Chromium, its driver or the `view` extra is (CI installs them: Debian's
chromium and chromium-driver)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

MISSING = [
    what
    for what, present in [
        ("chromium", shutil.which("chromium") or shutil.which("chromium-browser")),
        ("chromedriver", shutil.which("chromedriver")),
        ("the neuroglancer package", importlib.util.find_spec("neuroglancer")),
        ("selenium", importlib.util.find_spec("selenium")),
    ]
    if not present
]
NEEDS_BROWSER = pytest.mark.skipif(
    bool(MISSING),
    reason=f"no headless browser to render in: {', '.join(MISSING)} missing "
    "(Debian: apt-get install chromium chromium-driver; pip install 'shardwright[view]')",
)
