"""Every error shardwright raises on purpose, in one hierarchy.

`ShardwrightError` is the root: `except ShardwrightError` catches what the project refuses or
cannot do, and nothing else. Below it one class per kind of problem, each also a subclass of the
built-in error a caller would expect (`ValueError` for bad input, `OSError` for storage), so
existing `except ValueError` / `except OSError` handlers keep working.
"""

from __future__ import annotations

import re


class _WordedForEachFrontEnd(Exception):
    """Messages name options as the command line writes them (`--mips 9`); `str()` words them
    for the Python API (`mips=9`, `resume=True`), `for_command_line()` keeps the flags."""

    def __str__(self) -> str:
        return api_wording(super().__str__())

    def for_command_line(self) -> str:
        return super().__str__()


class ShardwrightError(_WordedForEachFrontEnd):
    """The root of every error this project raises on purpose."""


class ShardwrightWarning(_WordedForEachFrontEnd, UserWarning):
    """A job that runs, but likely not as meant (a voxel size guessed): said once, on stderr
    by the command line, as a Python warning in the API."""


_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?: ([^\s,;)]+))?")
_VALUE = re.compile(r"[0-9][0-9.,]*|auto|[A-Z]")


def api_wording(message: str) -> str:
    """`message` with every flag of ours replaced by the API parameter it sets (flags of other
    programs, such as dask-cuda-worker's `--resources`, stay)."""
    from shardwright.run_options import api_parameters

    parameters = api_parameters()

    def replace(match: re.Match[str]) -> str:
        flag, following = match.group(1), match.group(2)
        if flag not in parameters:
            return match.group(0)
        name, switch, choices = parameters[flag]
        rest = "" if following is None else f" {following}"
        if switch is not None:
            return f"{name}={switch!r}{rest}"
        if following is not None and (following in choices or _VALUE.fullmatch(following)):
            return f"{name}={following}"
        return f"{name}{rest}"

    return _FLAG.sub(replace, message)


# -- a job that cannot run as asked: raised before anything is written -----------------------


class PlanError(ShardwrightError, ValueError):
    """A conversion that cannot be done as asked; raised before anything is written."""


class PyramidError(PlanError):
    """A pyramid that cannot be built as asked."""


class DestinationError(PlanError):
    """A destination this job must not write, as asked."""


class LeaseHeld(PlanError):
    """Another job holds the destination's lease."""


class GpuUnavailable(PlanError):
    """No usable CUDA device or CuPy, or a plan the GPU engine cannot run; raised before
    anything is written."""


class NvcompUnavailable(PlanError):
    """nvCOMP is not installed, or cannot compress this codec on the device."""


class JobFailed(ShardwrightError, RuntimeError):
    """A job its cluster could not run (workers that kept dying): the message names the shard
    and what to change."""


# -- sources and encodings --------------------------------------------------------------------


class SourceError(ShardwrightError, ValueError):
    """A source that cannot be read as asked; the message names the source and the problem."""


class EncodingError(ShardwrightError, ValueError):
    """An encoding that cannot store this data type / channel count / layer type."""


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
