"""Ctrl-C and SIGTERM while a job runs: SIGTERM (what Kubernetes sends a pod) made to unwind
the job as Ctrl-C does, and a stop a finalizer swallowed raised again where the job next waits
(`jobs/supervision.py`). The command line installs them around a command (`cli/outcomes.py`
says how it ended)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


# A signal's exception raised while the main thread runs a finalizer (a `__del__`, a weakref
# callback: distributed's Future.__del__ each time the job drops a finished task) cannot leave
# it: Python prints it as "Exception ignored" and carries on, and the job would run to its end.
# Kept here instead, for `raise_if_stopped` to raise again where the job next waits.
_lost: list[BaseException] = []


def _keeping_lost_stops(hook: Any) -> Any:
    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt | Terminated):
            _lost.append(info.exc_value)
        else:
            hook(info)

    return unraisable


def raise_if_stopped() -> None:
    """Raise the Ctrl-C or SIGTERM a finalizer swallowed, if any (see `_lost`)."""
    if _lost:
        raise type(_lost.pop())()


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM unwinds the command (as Ctrl-C does) while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _lost.clear()
    hook, sys.unraisablehook = sys.unraisablehook, _keeping_lost_stops(sys.unraisablehook)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = hook
