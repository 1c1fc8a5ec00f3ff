"""Waiting for a killed or stopped job's processes to be gone."""

from __future__ import annotations

import os
import time


def wait_until_gone(group: int, seconds: float, what: str) -> None:
    """Return once no process of process group `group` is left; fail with `what` after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
