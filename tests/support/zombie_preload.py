"""A `dask worker --preload` that makes the worker a zombie at the worst moment: its first shard
write stops right after its lease check passed, before the upload (as a worker frozen, or cut
off, there would), until the test creates `release` in $SW_ZOMBIE_DIR. It creates `frozen`
when it stops and writes what became of that write to `outcome` ("written", or the error).
The worker lives until then, as a frozen process would: cut off from its scheduler, a live
worker closes itself after a while (sooner than a slow run's two jobs take), and its process
would end with the held write.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import threading
import time
from typing import Any

from distributed import Worker

from shardwright.lifecycle import fencing, runs

FOLDER = pathlib.Path(os.environ["SW_ZOMBIE_DIR"])
_state = {"frozen": False}
_zombie = threading.local()  # set in the thread whose write was frozen
# The originals, also where dask imports this file a second time (it patches them once).
_check_lease = getattr(fencing.check_lease, "__wrapped__", fencing.check_lease)
_write_object = getattr(runs.FencedStore.write_object, "__wrapped__", runs.FencedStore.write_object)
_close = getattr(Worker.close, "held_close", Worker.close)  # (its own __wrapped__ is log_errors')
HELD_AT_MOST = 300.0  # seconds a closing zombie waits for its write to be told


def _check_then_freeze(store: Any) -> None:
    _check_lease(store)
    if not _state["frozen"]:
        _state["frozen"] = True
        _zombie.on = True
        (FOLDER / "frozen").touch()
        while not (FOLDER / "release").exists():
            time.sleep(0.05)


def _write_and_tell(
    store: Any, key: str, data: Any, expected: Any = None, *, size: int | None = None
) -> tuple[int, int]:
    try:
        written = _write_object(store, key, data, expected, size=size)
    except BaseException as exc:
        if getattr(_zombie, "on", False):
            (FOLDER / "outcome").write_text(f"{type(exc).__name__}: {exc}")
            _zombie.on = False
        raise
    if getattr(_zombie, "on", False):
        (FOLDER / "outcome").write_text("written")
        _zombie.on = False
    return written


async def _close_once_told(self: Worker, *args: Any, **kwargs: Any) -> Any:
    deadline = time.monotonic() + HELD_AT_MOST
    while _state["frozen"] and not (FOLDER / "outcome").exists():
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return await _close(self, *args, **kwargs)


_check_then_freeze.__wrapped__ = _check_lease  # type: ignore[attr-defined]
_write_and_tell.__wrapped__ = _write_object  # type: ignore[attr-defined]
fencing.check_lease = _check_then_freeze  # the job's fence is unpickled by this name
runs.FencedStore.write_object = _write_and_tell  # type: ignore[method-assign]
_close_once_told.held_close = _close  # type: ignore[attr-defined]
Worker.close = _close_once_told  # type: ignore[method-assign]
