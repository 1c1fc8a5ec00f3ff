"""How a checked job runs, as opposed to what it writes (options/): whether it continues or
replaces what DEST holds, where its tasks run, its lease, what it shows. These never change an
output byte, so they are not in the job's fingerprint.

Each field the command line offers carries its flag (flags.py), as ConvertOptions' fields do:
`shardwright convert`'s parser, the API's keyword arguments and the wording of errors all come
from these two dataclasses.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from shardwright.common.flags import cli, command_line_fields, parse_positive_int, spelled
from shardwright.errors import NAMED, OptionError, as_parameter
from shardwright.options import ConvertOptions

DEFAULT_LEASE_TIMEOUT = 120.0  # seconds without a heartbeat before a lease may be taken over
DASHBOARD = {"auto": None, "on": True, "off": False}
# Schedulers named rather than addressed: the job's size decides, a cluster of our own, or
# the tasks run in this process.
LOCAL_SCHEDULERS = ("auto", "local", "processes", "threads", "sync", "synchronous")


def is_scheduler_address(text: str) -> bool:
    """Whether `text` can name a Dask scheduler as distributed reads an address: a
    protocol and a location (`tcp://10.0.0.5:8786`, `inproc://...`), or a host and a port."""
    protocol, sep, location = text.partition("://")
    if sep:
        return bool(protocol) and bool(location)
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit()


def parse_dashboard(text: str) -> bool | None:
    if text not in DASHBOARD:
        raise argparse.ArgumentTypeError(f"expected auto, on or off, got {text!r}")
    return DASHBOARD[text]


@dataclass(frozen=True)
class RunOptions:
    """Where and how a checked job runs. With neither a `scheduler` nor a `client`, a Dask
    client the user made current (`distributed.Client(...)` in a notebook) runs it, as
    `dask.compute` would; without one, a local cluster started for the job (the command line
    never picks up a current client: it is a process of its own)."""

    resume: bool = field(
        default=False,
        metadata=cli(
            "--resume",
            "continue the job that wrote DEST: keep every shard its receipts prove intact",
            switch=True,
        ),
    )
    overwrite: bool = field(
        default=False,
        metadata=cli(
            "--overwrite",
            "replace the shardwright dataset in DEST (never anything else); its objects go "
            "only once the new manifest is written",
            switch=True,
        ),
    )
    scheduler: str | None = field(
        default=None,
        metadata=cli(
            "--scheduler",
            "ADDRESS | auto | local | processes | threads | sync (default: auto, threads of "
            "this process for a job reading under 4 GiB, else local: a distributed cluster "
            "of worker threads in this process; processes: one worker process per core; or "
            "$DASK_SCHEDULER_ADDRESS)",
        ),
    )
    workers: int | None = field(
        default=None,
        metadata=cli(
            "--workers",
            "worker processes (threads) to start (default: one per core)",
            parse=parse_positive_int,
        ),
    )
    wait_for_workers: float | None = field(
        default=None,
        metadata=cli(
            "--wait-for-workers",
            "give up when the scheduler has had no worker for SECONDS (default: wait, saying "
            "so every 30 s)",
            parse=float,
            metavar="SECONDS",
        ),
    )
    lease_timeout: float = field(
        default=DEFAULT_LEASE_TIMEOUT,
        metadata=cli(
            "--lease-timeout",
            "how long this job's lease on DEST may go unrenewed before another job may take "
            "it over",
            parse=float,
            metavar="SECONDS",
        ),
    )
    lease_wait: float = field(
        default=0.0,
        metadata=cli(
            "--lease-wait",
            "wait up to SECONDS for another job's lease on DEST to be released or to expire "
            "(a retried pod whose predecessor was killed); default: refuse at once",
            parse=float,
            metavar="SECONDS",
        ),
    )
    break_lease: bool = field(
        default=False,
        metadata=cli(
            "--break-lease",
            "take over DEST's lease even though its job seems alive (only when you know it "
            "has stopped)",
            switch=True,
        ),
    )
    progress: Any = field(  # bool, or a progress.Progress of the caller's
        default=True,
        metadata=cli("--quiet", "no progress bar, plan report or dashboard", switch=False),
    )
    dashboard: bool | None = field(
        default=None,
        metadata=cli(
            "--dashboard",
            "serve the Dask dashboard from a cluster we start (auto: when the source holds "
            "4 GiB or more and progress is shown: a smaller job ends before it could be "
            "opened, and it costs about a second to start)",
            parse=parse_dashboard,
            metavar="auto|on|off",
        ),
    )
    client: Any = field(default=None, repr=False)  # a distributed.Client (the API only)

    def __post_init__(self) -> None:
        spelled(self)  # "30" seconds, "4" workers, "on": as the command line spells them
        if self.resume and self.overwrite:
            raise OptionError(
                "{resume} and {overwrite} contradict each other; pass one",
                resume=True,
                overwrite=True,
            )
        scheduler = self.scheduler
        if scheduler not in (None, "", *LOCAL_SCHEDULERS) and not (
            isinstance(scheduler, str) and is_scheduler_address(scheduler)
        ):
            raise OptionError(
                f"{{scheduler}} {scheduler!r} is neither a scheduler's address (tcp://HOST:PORT "
                f"or HOST:PORT) nor one of {', '.join(LOCAL_SCHEDULERS[:-1])} (where none is "
                "named, $DASK_SCHEDULER_ADDRESS is read)",
                scheduler=NAMED,
            )
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise OptionError(
                f"{{workers}} must be a whole number of at least 1, got {self.workers!r}",
                workers=NAMED,
            )
        if self.wait_for_workers is not None and not self.wait_for_workers >= 0:
            raise OptionError(
                f"{{wait_for_workers}} must be seconds, got {self.wait_for_workers!r}",
                wait_for_workers=NAMED,
            )
        if not self.lease_timeout > 0 or not self.lease_wait >= 0:
            raise OptionError(
                "{lease_timeout} must be positive and {lease_wait} not negative, got "
                f"{self.lease_timeout} and {self.lease_wait}",
                lease_timeout=NAMED,
                lease_wait=NAMED,
            )

    @property
    def mode(self) -> str:
        """What the job does to what DEST holds: new, resume or overwrite."""
        return "resume" if self.resume else "overwrite" if self.overwrite else "new"

    def updated(self, values: dict[str, Any]) -> RunOptions:
        """These options with `values` (RunOptions field names) in place of theirs."""
        unknown = sorted(set(values) - FIELDS)
        if unknown:
            raise TypeError(f"unknown run option(s) {', '.join(unknown)}; known: {sorted(FIELDS)}")
        return dataclasses.replace(self, **values)


FIELDS = frozenset(f.name for f in dataclasses.fields(RunOptions))


def split_keywords(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword arguments of `convert(...)`: (ConvertOptions', RunOptions')."""
    run = {k: v for k, v in values.items() if k in FIELDS}
    return {k: v for k, v in values.items() if k not in FIELDS}, run


def flag_wording(field: str, value: Any) -> str:
    """An option named in an error as the command line gives it: `--mips 9`, `--resume`,
    `--gpu` (the switch that sets engine='gpu'), or the bare flag; an option the command line
    does not offer (a Dask `client`) as the API's parameter."""
    flag = FLAGS.get(field)
    if flag is None:
        return as_parameter(field, value)
    if value is NAMED or flag.switch is not None:
        return flag.name
    if isinstance(value, tuple | list):
        value = ",".join(str(v) for v in value)
    return f"{flag.name} {value}"


FLAGS = {
    f.name: flag for cls in (ConvertOptions, RunOptions) for f, flag in command_line_fields(cls)
}
