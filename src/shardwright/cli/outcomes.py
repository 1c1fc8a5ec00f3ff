"""How a command ends: its exit status and the one line (or paragraph) that says why.

- 0: done. 2: a problem the message names: shardwright's own errors, and the few OS errors a
  user acts on (a missing file, no permission, a full disk). 1: the job failed on its cluster
  (JobFailed: workers that kept dying, a cluster left with none, a lost scheduler, a lease this
  host could not renew); its paragraph names the whole command that continues it.
- 130 / 143: stopped by Ctrl-C / SIGTERM (what Kubernetes sends a pod). SIGTERM is made to
  unwind the job as Ctrl-C does: its tasks cancelled, its lease released, so a retried job
  starts at once; the line says what its destination holds (read from the job's journal, as
  `status` reads it: what `--resume` keeps) and the command that continues it.
- 141: the reader of stdout went away (`verify ... | head`): nothing more is said.
- Anything else is a bug in shardwright, never disguised as a user's error: its traceback and a
  line that says so (70).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable
from typing import Any

from shardwright.errors import JobFailed, ShardwrightError
from shardwright.jobs.stops import Terminated
from shardwright.lifecycle.run_options import flag_wording

INTERRUPTED, TERMINATED, BROKEN_PIPE, BUG = 130, 143, 141, 70
# OS errors whose message is the whole story: the user fixes a path, a permission, a disk.
ACTIONABLE_ERRNOS = frozenset(
    {errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EROFS,
     errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EMFILE,
     errno.ENFILE, errno.ELOOP, errno.EXDEV, errno.ENOTEMPTY}
)  # fmt: skip


def report(
    command: str,
    exc: BaseException,
    *,
    debug: bool,
    resume: str | None,
    stored: Callable[[], str | None] = lambda: None,
) -> int:
    """Say how the command ended and return its exit status. `stored`: what a stopped job's
    destination holds, read once the job has unwound (`JobStatus.stored`)."""
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, KeyboardInterrupt | Terminated):
        said = "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped (SIGTERM)"
        if (held := stored()) is not None:
            said += f"; stored so far: {held}"
        if resume:
            said += f"; its lease is released: continue with `{resume}`"
        print(f"shardwright {command}: {said}", file=sys.stderr, flush=True)
        return INTERRUPTED if isinstance(exc, KeyboardInterrupt) else TERMINATED
    if isinstance(exc, BrokenPipeError):
        _quiet_stdout()
        return BROKEN_PIPE
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, ShardwrightError):
        wording = flag_wording
        if isinstance(exc, JobFailed) and resume:  # the command that continues it, whole
            wording = _continued_by(resume)
        print(f"shardwright {command}: error: {exc.render(wording)}", file=sys.stderr)
        return 1 if isinstance(exc, JobFailed) else 2
    if isinstance(exc, OSError) and exc.errno in ACTIONABLE_ERRNOS:
        print(f"shardwright {command}: error: {exc}", file=sys.stderr)
        return 2
    if not debug:
        traceback.print_exception(exc)
    print(
        f"shardwright {command}: this is a bug in shardwright ({type(exc).__name__}); please "
        "report it with the traceback above",
        file=sys.stderr,
    )
    return BUG


def _continued_by(resume: str) -> Any:
    """Option wording that names `--resume` as the whole command that continues the job."""

    def wording(field: str, value: Any) -> str:
        return f"`{resume}`" if field == "resume" else flag_wording(field, value)

    return wording


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no closed pipe."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def program() -> str:
    """How to start shardwright again as this process was started, as a command to type:
    `shardwright` where that name on PATH is this very script, else the path the script was
    run by (`.venv/bin/shardwright` from a virtualenv not activated), else
    `python -m shardwright` with this interpreter."""
    started = sys.argv[0] if sys.argv else ""
    if not started or started.endswith(".py"):  # python -m shardwright (or shardwright.cli)
        return shlex.join([_as_typed(sys.executable), "-m", "shardwright"])
    name = os.path.basename(started)
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(started):
        return name
    return shlex.quote(_as_typed(started))


def _as_typed(path: str) -> str:
    """A path relative to the current folder where it lies inside it, else absolute."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return relative if not relative.startswith("..") else absolute
