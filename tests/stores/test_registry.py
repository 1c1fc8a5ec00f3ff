"""`open_store(url)`: the registry's table picks the backend by the URL's protocol, and a
backend's module loads only when a store of its kind is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardwright.stores import Store, backend_for, open_store
from shardwright.stores.fsspec_store import FsspecStore
from shardwright.stores.local import LocalStore
from shardwright.stores.memory import MemoryStore


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("/data/out", LocalStore),
        ("relative/out", LocalStore),
        ("file:///data/out", LocalStore),
        ("memory://out", MemoryStore),
        ("s3://bucket/out", FsspecStore),
        ("gs://bucket/out", FsspecStore),
        ("http://host/out", FsspecStore),
    ],
)
def test_each_url_opens_its_protocols_backend(url: str, backend: type[Store]) -> None:
    assert backend_for(url) is backend
    store = open_store(url, {"anon": True} if "://" in url else None)
    assert type(store) is backend and store.url == url.rstrip("/")


def test_the_abstract_store_cannot_be_opened_directly() -> None:
    with pytest.raises(TypeError):
        Store("/data/out")  # type: ignore[abstract]


def test_importing_the_registry_loads_no_backend() -> None:
    script = (
        "import sys, shardwright.stores\n"
        "print(sorted(m for m in sys.modules if m.startswith('shardwright.stores.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shared = ["base", "registry", "retry"]  # what every backend shares, but no backend
    assert done.stdout.strip() == str([f"shardwright.stores.{name}" for name in shared])
