"""How a source's kind is told from its name, without importing the library that reads it."""

from __future__ import annotations

import os

TIFF_SUFFIXES = (".tif", ".tiff")
REMOTE_SCHEMES = ("gs", "gcs", "s3", "http", "https")


def is_tiff_name(name: str) -> bool:
    """A TIFF by its name; dot files (macOS `._slice.tif` forks) are not slices."""
    base = os.path.basename(name)
    return base.lower().endswith(TIFF_SUFFIXES) and not base.startswith(".")
