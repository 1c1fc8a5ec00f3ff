"""A `dask worker --preload` that makes the worker a zombie at the worst moment: its first shard
write stops right after its lease check passed, before the upload (as a worker frozen, or cut
off, there would), until the test creates `release` in $SW_ZOMBIE_DIR. It creates `frozen`
when it stops and writes what became of that write to `outcome` ("written", or the error).
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from typing import Any

from shardwright.lifecycle import fencing
from shardwright.stores import base

FOLDER = pathlib.Path(os.environ["SW_ZOMBIE_DIR"])
_state = {"frozen": False}
_zombie = threading.local()  # set in the thread whose write was frozen
# The originals, also where dask imports this file a second time (it patches them once).
_check_lease = getattr(fencing.check_lease, "__wrapped__", fencing.check_lease)
_write_object = getattr(base.Store.write_object, "__wrapped__", base.Store.write_object)


def _check_then_freeze(store: Any) -> None:
    _check_lease(store)
    if not _state["frozen"]:
        _state["frozen"] = True
        _zombie.on = True
        (FOLDER / "frozen").touch()
        while not (FOLDER / "release").exists():
            time.sleep(0.05)


def _write_and_tell(store: Any, key: str, data: Any) -> tuple[int, int]:
    try:
        written = _write_object(store, key, data)
    except BaseException as exc:
        if getattr(_zombie, "on", False):
            (FOLDER / "outcome").write_text(f"{type(exc).__name__}: {exc}")
            _zombie.on = False
        raise
    if getattr(_zombie, "on", False):
        (FOLDER / "outcome").write_text("written")
        _zombie.on = False
    return written


_check_then_freeze.__wrapped__ = _check_lease  # type: ignore[attr-defined]
_write_and_tell.__wrapped__ = _write_object  # type: ignore[attr-defined]
fencing.check_lease = _check_then_freeze  # the job's fence is unpickled by this name
base.Store.write_object = _write_and_tell  # type: ignore[method-assign]
