"""Every error shardwright raises on purpose, in one hierarchy, depending on nothing of the
project.

`ShardwrightError` is the root: `except ShardwrightError` catches what the project refuses or
cannot do, and nothing else. Below it one class per kind of problem, each also a subclass of the
built-in error a caller would expect (`ValueError` for bad input, `OSError` for storage), so
existing `except ValueError` / `except OSError` handlers keep working.

A message names the options it is about as data: `{field}` in its text, with `field=value` (or
`field=NAMED`) given beside it. Each front end words them its own way: `str()` as the Python
API's parameters (`mips=9`, `resume=True`), the command line as its flags (`--mips 9`,
`--resume`; `render` with the wording `run_options.flag_wording`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class _Named:
    """An option named in a message without a value ("give it with --resolution")."""

    def __repr__(self) -> str:
        return "NAMED"

    def __reduce__(self) -> str:
        return "NAMED"  # unpickled as this module's one NAMED (errors cross process bounds)


NAMED: Any = _Named()


@dataclass(frozen=True)
class Alias:
    """Another mention of an option a message names already, with another value: "{mips} is
    too many ... use {most} or fewer" with `mips=9, most=Alias("mips", 3)`."""

    field: str
    value: Any


OptionWording = Callable[[str, Any], str]  # (field, value or NAMED) -> how a front end says it


def as_parameter(field: str, value: Any) -> str:
    """An option as a Python caller passes it: `mips=9`, `engine='gpu'`, or its bare name."""
    return field if value is NAMED else f"{field}={value!r}"


class _Worded(Exception):
    """A message whose `{field}`s name options (`options`: field -> value), worded as API
    parameters by `str()` and as anything else by `render`."""

    def __init__(self, message: str = "", /, **options: Any) -> None:
        super().__init__(message)
        self.message = message
        self.options = options

    def render(self, wording: OptionWording) -> str:
        text = self.message
        for key, value in self.options.items():
            field, value = (value.field, value.value) if isinstance(value, Alias) else (key, value)
            text = text.replace("{" + key + "}", wording(field, value))
        return text

    def __str__(self) -> str:
        return self.render(as_parameter)


class ShardwrightError(_Worded):
    """The root of every error this project raises on purpose."""


class ShardwrightWarning(_Worded, UserWarning):
    """A job that runs, but likely not as meant (a voxel size guessed): said once, on stderr
    by the command line, as a Python warning in the API."""


# -- a job that cannot run as asked: raised before anything is written -----------------------


class PlanError(ShardwrightError, ValueError):
    """A conversion that cannot be done as asked; raised before anything is written."""


class OptionError(PlanError):
    """An option's value no conversion, job or lease can honour (out of range, wrong type,
    unknown name): the same class wherever the value is checked."""


class PyramidError(PlanError):
    """A pyramid that cannot be built as asked."""


class DestinationError(PlanError):
    """A destination this job must not write, as asked."""


class LeaseHeld(PlanError):
    """Another job holds the destination's lease; `holder` says which (None: unreadable)."""

    holder: str | None = None


class GpuUnavailable(PlanError):
    """No usable CUDA device or CuPy, or a plan the GPU engine cannot run; raised before
    anything is written."""


class NvcompUnavailable(PlanError):
    """nvCOMP is not installed, or cannot compress this codec on the device."""


class JobFailed(ShardwrightError, RuntimeError):
    """A job its cluster could not run (workers that kept dying): the message names the shard
    and what to change."""


class LeaseUnrenewed(JobFailed):
    """The coordinator could not renew its job's lease for half the lease's timeout (the store
    unreachable from it): the job stops before another job may take the destination over."""


# -- sources and encodings --------------------------------------------------------------------


class SourceError(ShardwrightError, ValueError):
    """A source that cannot be read as asked; the message names the source and the problem."""


class EncodingError(ShardwrightError, ValueError):
    """An encoding that cannot store this data type / channel count / layer type."""


class CodecUnavailable(EncodingError):
    """A chunk encoding read through a package that is not installed (compresso, crackle):
    the message names the encoding, the package and the command that installs it."""


# -- bytes that do not follow a format ---------------------------------------------------------


class FormatError(ShardwrightError, ValueError):
    """Bytes or a document that do not follow the format they claim."""


class InfoError(FormatError):
    """An `info` file (or a scale of it) that readers would reject."""


class ShardingSpecError(FormatError):
    """A sharding specification that the format does not allow."""


class ShardFormatError(FormatError):
    """Bytes that are not a well-formed shard (precomputed or zarr3 `sharding_indexed`)."""


class ZarrMetadataError(FormatError):
    """A `zarr.json` (or metadata model) that shardwright cannot write or read."""


class MeshFormatError(FormatError):
    """A mesh object or mesh `info` that does not follow the format."""


class SkeletonFormatError(FormatError):
    """A skeleton or skeleton `info` that does not follow the format."""


class ManifestError(FormatError):
    """A manifest (or job record) that is not what this project writes."""


# -- storage -----------------------------------------------------------------------------------


class StoreError(ShardwrightError, OSError):
    """A request that failed for good; the message names the object and the cause."""


class LeaseLost(StoreError):
    """The destination's lease no longer names this run: another job took it over."""


def within(exc: Exception, prefix: str = "") -> ShardwrightError:
    """`exc` as a planning error with `prefix` before its message: in its own class where it
    is one of ours (a PyramidError stays one, its options kept), a PlanError otherwise."""
    if not isinstance(exc, ShardwrightError):
        return PlanError(prefix + str(exc))
    if not prefix:
        return exc
    return type(exc)(prefix + exc.message, **exc.options)
