"""What a command says besides its result: by default nothing; with `--verbose` the job's steps
(shardwright's own log) and the warnings of the clusters it starts and of their workers;
`--debug` adds the tracebacks of errors (cli/outcomes.py).

Clusters shardwright starts silence their logs below the level given here, so that a job that
runs well prints only its progress and its summary.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LOG = logging.getLogger("shardwright")
FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"
_state = {"verbose": False}


class _OwnHandler(logging.StreamHandler[TextIO]):
    """The stderr handler this module adds to a logger (once: a second setup finds it)."""


def configure(verbose: bool) -> None:
    """This process's logging for one command."""
    _state["verbose"] = verbose
    if not verbose:
        # asyncio's own complaints in the clusters' event loops ("Future exception was never
        # retrieved" for a timeout a library dropped) are nothing a user can act on.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return
    for name, level in (("shardwright", logging.INFO), ("distributed", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not any(isinstance(h, _OwnHandler) for h in logger.handlers):
            # One handler each: distributed sets the level of its loggers' handlers.
            handler = _OwnHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(FORMAT))
            logger.addHandler(handler)


def cluster_level() -> int:
    """The lowest level a cluster shardwright starts still logs."""
    return logging.WARNING if _state["verbose"] else logging.CRITICAL
