"""Ctrl-C and SIGTERM while a job runs (`jobs/stops.py`): SIGTERM unwinds the block as Ctrl-C
does and the handler before it comes back after; a stop raised inside a finalizer, which
Python would print and swallow, is kept and raised where the job next waits; any other error
of a finalizer still goes to the hook there was."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from typing import Any

import pytest

from shardwright.jobs import stops


class _RaisesWhenCollected:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __del__(self) -> None:
        raise self.error


def test_sigterm_unwinds_the_block_and_the_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(stops.Terminated), stops.stopped_by_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in the main thread at once
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_a_finalizer_swallowed_is_raised_where_the_job_waits() -> None:
    seen: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with stops.stopped_by_signals():
            _RaisesWhenCollected(KeyboardInterrupt())
            gc.collect()
            _RaisesWhenCollected(ValueError("another finalizer's error"))
            gc.collect()
            with pytest.raises(KeyboardInterrupt):
                stops.raise_if_stopped()
            stops.raise_if_stopped()  # raised once: nothing left
    finally:
        sys.unraisablehook = hook
    assert [type(info.exc_value) for info in seen] == [ValueError]


def test_outside_the_main_thread_nothing_is_installed() -> None:
    handlers: list[Any] = []

    def run() -> None:
        with stops.stopped_by_signals():
            handlers.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert handlers == [before]
