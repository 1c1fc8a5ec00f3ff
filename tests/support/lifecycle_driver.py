"""Runs `shardwright` with a pause at one step of a job, for tests that kill it there.

    python lifecycle_driver.py PAUSE MARKER convert SOURCE DEST [options]

PAUSE names the step: `lease` (the lease taken, nothing else written), `begin` (the job
recorded in its destination), `shards:N` (N shards stored with their receipts), `manifest`
(the manifest written, nothing removed yet), `addition` (an addition's lease and record
taken, nothing else written), `info` (an addition's info written, its record not yet
finished), `cleanup` (the first object of a replaced dataset removed), `slow` (every shard
task sleeps 0.2 s first, no pause), `slow-blocks` (every mesh block task 0.3 s, no pause),
`slow-tables` (every partition and shard task of a table 0.2 s, no pause) or `none`. At the
pause the driver creates MARKER and sleeps until it is killed. Runs with `--scheduler sync`:
one process, so SIGKILL of its process group stops every part of the job at once.
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

import shardwright.engine.engines as engines
import shardwright.jobs.coordinator as coordinator
from shardwright.cli import main
from shardwright.lifecycle import addition, journal, lease
from shardwright.stores.local import LocalStore

PAUSE, MARKER = sys.argv[1], pathlib.Path(sys.argv[2])


def hold() -> None:
    MARKER.touch()
    time.sleep(3600)


def after(owner: Any, name: str, condition: Any = lambda: True) -> None:
    """Pause right after `owner.name` returns, once `condition()` holds."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if condition():
            hold()
        return result

    setattr(owner, name, wrapped)


if PAUSE == "lease":
    after(lease.Lease, "acquire")
elif PAUSE == "begin":
    after(journal, "begin")
elif PAUSE.startswith("shards:"):
    written = {"n": 0}
    limit = int(PAUSE.split(":")[1])

    def count() -> bool:
        written["n"] += 1
        return written["n"] >= limit

    after(journal, "record", count)
elif PAUSE == "manifest":
    after(coordinator, "write_manifest")
elif PAUSE == "addition":
    after(addition, "begin_addition")
elif PAUSE == "info":
    after(addition, "write_root_last")
elif PAUSE == "cleanup":  # inside the removal of a replaced dataset's objects
    removing = {"on": False}
    remove = journal.remove

    def flagged(*args: Any, **kwargs: Any) -> Any:
        removing["on"] = True
        return remove(*args, **kwargs)

    journal.remove = flagged
    after(LocalStore, "delete", lambda: removing["on"])
elif PAUSE == "slow-blocks":  # each mesh block task takes 0.3 s more, in short sleeps
    import shardwright.engine.generated_objects as generated_objects

    block = generated_objects.run_block

    def slow_block(*args: Any, **kwargs: Any) -> Any:
        for _ in range(6):
            time.sleep(0.05)
        return block(*args, **kwargs)

    generated_objects.run_block = slow_block
elif PAUSE == "slow-tables":  # each task of a table's job takes 0.2 s more
    import shardwright.jobs.shard_stream as shard_stream

    def slowed(task: Any) -> Any:
        def slow_task(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.2)
            return task(*args, **kwargs)

        return slow_task

    for name in ("_partition", "_annotation_shard"):  # what the table's stream names
        setattr(shard_stream, name, slowed(getattr(shard_stream, name)))
elif PAUSE == "slow":
    original = engines.run_cpu_shard

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return original(*args, **kwargs)

    engines.run_cpu_shard = slow
elif PAUSE != "none":
    raise SystemExit(f"unknown pause {PAUSE!r}")

raise SystemExit(main([*sys.argv[3:], "--scheduler", "sync", "--quiet"]))
