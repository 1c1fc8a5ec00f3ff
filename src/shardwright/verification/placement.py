"""Where the output sits against its source: voxel size, offset, axis order and unit, compared
as voxels are.

The output's placement is read as readers read it, by its format's reader
(`formats/<name>/verifying.py`): `info`'s finest scale (resolution and voxel offset), or the
OME-Zarr group's transforms of level 0 (scale and translation, in nm).
The expected placement is the source's own (its metadata, read again), or the value the job
was given (`--resolution`, `--voxel-offset`, recorded in its plan), which a note names. Every
difference is a problem.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardwright.planning.formats import reader_of
from shardwright.planning.geometry import DEFAULT, OPTION, Placed
from shardwright.planning.text import xyz
from shardwright.sources import Source
from shardwright.verification.report import VerifyReport

FLAGS = {"resolution": "--resolution", "voxel_offset": "--voxel-offset"}


@dataclass(frozen=True)
class Expected:
    """Where the output should sit: voxel size (nm), offset (voxels) and the fraction of a
    voxel and the unit OME-Zarr output writes (`Placed.of`, as the job decided them), each
    value with where it came from."""

    resolution: tuple[float, ...]
    voxel_offset: tuple[int, ...]
    subvoxel_offset: tuple[float, ...]
    unit: str  # the OME-Zarr output's length unit
    whence: dict[str, str]


def check_placement(
    report: VerifyReport, plan: dict[str, Any], documents: dict[str, Any], source: Source
) -> None:
    """Problems where the output's voxel size, offset, axes or unit differ from the source's
    (or from the values the job was given), notes where the job was given them."""
    if "placement" not in plan:  # written before jobs recorded where placement came from
        report.notes.append("the manifest does not record the job's placement: not compared")
        return
    expected = _expected(report, plan, source)
    found = reader_of(documents)
    if found is None or found[1].check_placement is None:
        report.notes.append("the output's metadata records no placement: not compared")
        return
    found[1].check_placement(report, documents, expected, source)


def _expected(report: VerifyReport, plan: dict[str, Any], source: Source) -> Expected:
    """The source's placement, or where the plan records a value given, that value (noted)."""
    placed = plan.get("placement") or {}
    hints = source.hints
    values: dict[str, tuple[float, ...]] = {
        "resolution": hints.resolution or (1.0, 1.0, 1.0),
        "voxel_offset": hints.voxel_offset or (0, 0, 0),
    }
    recorded = {
        "resolution": plan.get("resolution_xyz"),
        "voxel_offset": plan.get("voxel_offset_xyz"),
    }
    whence = {}
    for field in values:
        where, value = placed.get(f"{field}_from"), recorded[field]
        if where == OPTION and isinstance(value, list):
            own = getattr(hints, field)
            report.notes.append(
                f"{field.replace('_', ' ')} {_xyz(value)} was given with {FLAGS[field]} "
                f"(the source's own: {_xyz(own) if own is not None else 'none recorded'})"
            )
            values[field] = tuple(value)
            whence[field] = "as the job was given it"
        else:
            whence[field] = (
                f"the source's, from {hints.placed_by}"
                if hints.placed_by
                else "none recorded: the default"
            )
            if where == DEFAULT and field == "resolution":
                report.notes.append("the source records no voxel size: 1 nm was written")
    kept = Placed.of(
        hints, str(placed.get("resolution_from")), str(placed.get("voxel_offset_from"))
    )
    return Expected(
        values["resolution"],
        tuple(int(v) for v in values["voxel_offset"]),
        kept.subvoxel_offset,
        kept.unit,
        whence,
    )


def compare_placed(
    report: VerifyReport,
    what: str,
    got: Sequence[float],
    want: Sequence[float],
    expected: Expected,
    field: str,
) -> None:
    """A problem where the output's `what` (`got`) differs from `want`, saying where the
    expected value comes from (`expected.whence[field]`)."""
    if not _same(got, want):
        report.problems.append(
            f"placement: the output's {what} is {_xyz(got)}, expected {_xyz(want)} "
            f"({expected.whence[field]})"
        )


def _xyz(values: Sequence[float]) -> str:
    return xyz((f"{float(v):.12g}" for v in values), ",")


def check_foreign_placement(report: VerifyReport, output: Source, source: Source) -> None:
    """Where a dataset another tool wrote sits against its source: the output's voxel size and
    offset read as any source's (its `info`'s finest scale, its OME-Zarr transforms), each
    compared where the source records it (no manifest says what the tool was given); what
    the source does not record is a note."""
    mine, theirs = output.hints, source.hints
    recorded = f"the source's, from {theirs.placed_by}"
    unrecorded = []
    for field, what in (("resolution", "voxel size (nm)"), ("voxel_offset", "voxel offset")):
        want, got = getattr(theirs, field), getattr(mine, field)
        if want is None:
            unrecorded.append(what.split(" (")[0])
        elif got is None:
            refusal = mine.resolution_refusal if field == "resolution" else mine.offset_refusal
            report.problems.append(
                f"placement: the output records no {what}, expected {_xyz(want)} ({recorded})"
                + (f": {refusal}" if refusal else "")
            )
        elif not _same(got, want):
            report.problems.append(
                f"placement: the output's {what} is {_xyz(got)}, expected {_xyz(want)} ({recorded})"
            )
    if unrecorded:
        report.notes.append(f"the source records no {' or '.join(unrecorded)}: not compared")


def _same(got: Sequence[float], want: Sequence[float]) -> bool:
    return len(got) == len(want) and all(
        math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)
        for a, b in zip(got, want, strict=True)
    )
