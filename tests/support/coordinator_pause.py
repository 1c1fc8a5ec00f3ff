"""Runs `shardwright` holding the job's coordinator at one step until the test lets it go, for
tests that cut its host off there (tests/e2e/test_across_hosts.py).

    SW_PAUSE=STEP SW_PAUSE_DIR=FOLDER python coordinator_pause.py convert SOURCE DEST [options]

STEP names where the coordinator waits: `listing` (its lease taken: next it lists the
destination and records the job), `receipts` (8 receipts folded: the window waits on the
cluster) or `manifest` (every shard task returned: next it lists the destination and writes
the manifest). There it creates FOLDER/paused and waits until FOLDER/go exists, then goes on
as if nothing had happened.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from typing import Any

import shardwright.jobs.submission as submission
from shardwright.cli import main
from shardwright.lifecycle import lease
from shardwright.lifecycle.manifest import ReceiptTable

STEP, FOLDER = os.environ["SW_PAUSE"], pathlib.Path(os.environ["SW_PAUSE_DIR"])
_paused = {"done": False}


def hold() -> None:
    """Once: say so, and wait for the test's go."""
    if _paused["done"]:
        return
    _paused["done"] = True
    (FOLDER / "paused").touch()
    while not (FOLDER / "go").exists():
        time.sleep(0.05)


def before(owner: Any, name: str, condition: Any = lambda: True) -> None:
    """Hold right before `owner.name` runs, once `condition()` holds."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if condition():
            hold()
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)


if STEP == "listing":
    acquire = lease.Lease.acquire

    def acquired(self: Any, *args: Any, **kwargs: Any) -> Any:
        notice = acquire(self, *args, **kwargs)
        hold()
        return notice

    lease.Lease.acquire = acquired  # type: ignore[method-assign]
elif STEP == "receipts":
    folded = {"n": 0}

    def eighth() -> bool:
        folded["n"] += 1
        return folded["n"] > 8

    before(ReceiptTable, "add", eighth)
elif STEP == "manifest":
    before(submission, "finish_dataset")
else:
    raise SystemExit(f"unknown step {STEP!r}")

raise SystemExit(main(sys.argv[1:]))
