"""The job's coordinator in a thread of its own, watched from the thread that runs the job.

A coordinator that cannot renew its lease stops within the lease's timeout, whatever it was
doing (ARCHITECTURE invariant 11): a listing or a manifest retried against a store this host no
longer reaches, a gather from a scheduler it no longer reaches. Such waits cannot be cut short
where they are, so the coordinator's steps run in a daemon thread while the thread that runs
the job watches its leases every WATCH_S: once one has gone unrenewed too long it raises
LeaseUnrenewed at once, and the leases' runs are halted (`Renewer.halt`), so that a step still
waiting does nothing once its request returns.

A stop (Ctrl-C, SIGTERM) lands in the watching thread: it is handed to the coordinator, which
raises it at its next wait and unwinds there (its tasks cancelled, its leases given back),
watched as before, as long as it holds a lease; one that holds none (waiting for another
job's, say) has nothing to give back and is left to stop at its next step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from shardwright.errors import LeaseUnrenewed
from shardwright.jobs.stops import raise_if_stopped
from shardwright.lifecycle.lease import Renewer

T = TypeVar("T")
WATCH_S = 1.0  # how often, at least, the job's leases are checked while its coordinator runs


class Supervisor:
    """Runs a job's coordinator (`run`) while watching `leases`; the coordinator's own waits
    call `check`, which raises a stop handed over or an unrenewed lease."""

    def __init__(self, leases: Renewer) -> None:
        self.leases = leases
        self._stop: BaseException | None = None

    def check(self) -> None:
        if self._stop is not None:
            raise type(self._stop)()
        self.leases.check()

    def run(self, work: Callable[[], T]) -> T:
        """`work()` in the coordinator's thread: its result, or its error raised here."""
        outcome: list[tuple[bool, Any]] = []
        ended = threading.Event()  # not Thread.join: a Ctrl-C during it marks a live thread ended
        threading.Thread(
            target=_keep, args=(work, outcome, ended), name="shardwright-coordinator", daemon=True
        ).start()
        try:
            self._watch(ended)
        except LeaseUnrenewed:
            raise
        except BaseException as stop:  # Ctrl-C, SIGTERM: the coordinator unwinds, watched
            self._stop = stop
            self._watch(ended, while_held=True)
            raise
        done, value = outcome[0]
        if done:
            return value
        if isinstance(value, LeaseUnrenewed):
            self.leases.halt()
        raise value

    def _watch(self, ended: threading.Event, while_held: bool = False) -> None:
        """Until the coordinator has `ended` (or, `while_held`, holds no lease any more);
        LeaseUnrenewed (the job's runs halted) once a lease is late."""
        while not (while_held and not self.leases.held()) and not ended.wait(WATCH_S):
            raise_if_stopped()  # a Ctrl-C or SIGTERM lost in a finalizer: raised again here
            try:
                self.leases.check()
            except LeaseUnrenewed:
                self.leases.halt()
                raise


def _keep(work: Callable[[], Any], outcome: list[tuple[bool, Any]], ended: threading.Event) -> None:
    """Run in the coordinator's thread: what `work` returned or raised, kept for the caller."""
    try:
        outcome.append((True, work()))
    except BaseException as exc:  # noqa: BLE001 - handed to the watching thread
        outcome.append((False, exc))
    finally:
        ended.set()
