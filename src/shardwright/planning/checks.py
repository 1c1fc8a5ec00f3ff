"""Values no conversion can honour, refused while planning, before anything is written.

Each check names the value and why it cannot be used: a geometry that readers cannot
represent (non-finite resolutions, coordinates beyond int64, empty axes), scale keys that
would collide with the dataset's own objects, data types a layer type cannot hold, and
options the chosen format or encoding would silently ignore.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from shardwright.common.control_keys import CONTROL_PREFIX, MANIFEST_KEY
from shardwright.errors import NAMED, Alias, OptionError, PlanError
from shardwright.options import ConvertOptions
from shardwright.planning.text import xyz
from shardwright.sources import missing

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Objects of a dataset that a scale directory must not shadow: the metadata, the manifest
# and the job's own control prefix (see lifecycle/).
RESERVED_NAMES = ("info", "zarr.json", MANIFEST_KEY, CONTROL_PREFIX.rstrip("/"))


def check_size(size: Sequence[int], source: str) -> None:
    if any(int(s) <= 0 for s in size):
        raise PlanError(
            f"{source} has a zero-length axis (size x,y,z = {xyz(size, ',')}): nothing to convert"
        )


def check_sampled_missing(url: str, absent: missing.Tally, fill_missing: bool) -> None:
    """Refuse a source of which no sampled chunk is stored: a wrong path, scale or prefix
    reads as an empty volume, and converting it would write nothing but the fill value."""
    if absent.looked_at and absent.missing == absent.looked_at and not fill_missing:
        shown = ", ".join(absent.examples[:3])
        raise PlanError(
            f"no data at {url}: none of the {absent.looked_at} source chunks sampled is stored "
            f"(e.g. {shown}); check the path and the scale, or pass {{fill_missing}} to "
            "convert it as the fill value",
            fill_missing=True,
        )


def check_resolution(resolution: Sequence[float]) -> None:
    if len(resolution) != 3 or not all(math.isfinite(r) and r > 0 for r in resolution):
        raise PlanError(
            f"resolution must be three finite positive numbers x,y,z, got {xyz(resolution, ',')}"
        )


def check_axis_order(
    field: str, given: Sequence[float] | None, recorded: Sequence[float] | None, where: str
) -> None:
    """Refuse a voxel size or offset given that is the source's own in another axis order (z,y,x
    typed for x,y,z): it would place the data elsewhere, squashed, and look deliberate."""
    if given is None or recorded is None:
        return
    ours, theirs = [float(v) for v in given], [float(v) for v in recorded]
    if _close(ours, theirs) or not _close(sorted(ours), sorted(theirs)):
        return
    what = "voxel size (nm)" if field == "resolution" else "voxel offset"
    raise PlanError(
        f"{{{field}}} is the source's {what} {xyz(_whole(theirs), ',')} (x,y,z, from {where}) "
        f"in another order: give it x,y,z ({{fixed}}), or leave it out to take the source's",
        **{field: tuple(_whole(ours)), "fixed": Alias(field, tuple(_whole(theirs)))},
    )


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b, strict=True)
    )


def _whole(values: Sequence[float]) -> list[int | float]:
    return [int(v) if float(v).is_integer() else v for v in values]


def check_voxel_offset(offset: Sequence[int], size: Sequence[int]) -> None:
    """Every voxel coordinate, offset included, must fit a signed 64-bit integer: what
    `info` readers (TensorStore, Neuroglancer) and OME-Zarr translations store."""
    if len(offset) != 3:
        raise PlanError(f"voxel offset must be three integers x,y,z, got {xyz(offset, ',')}")
    for axis, start, extent in zip("xyz", offset, size, strict=True):
        if start < INT64_MIN or start + extent - 1 > INT64_MAX:
            raise PlanError(
                f"voxel offset {xyz(offset, ',')}: the {axis} coordinates {start} .. "
                f"{start + extent - 1} do not fit a signed 64-bit integer"
            )


def check_scale_key(key: str) -> None:
    """A scale key names one directory directly below the dataset root."""
    if "/" in key or "\\" in key or key in (".", "..") or key.startswith("."):
        raise PlanError(
            f"scale key {key!r} must name one directory directly below the dataset root "
            "(no path separators, not starting with '.')"
        )
    if key in RESERVED_NAMES:
        raise PlanError(f"scale key {key!r} is the name of one of the dataset's own objects")


def check_layer_dtype(layer_type: str, dtype: np.dtype) -> None:
    """Segmentations hold integer labels: floating-point voxels cannot be segment ids."""
    if layer_type == "segmentation" and dtype.kind not in "ui":
        raise PlanError(
            f"{dtype.name} voxels cannot be a segmentation (segment ids are integers); "
            "use layer type image, or convert the labels to an unsigned integer type first"
        )


def check_block_size(options: ConvertOptions, encoding: str | None) -> None:
    """A block size only with compressed_segmentation (None: not decided yet, see builder)."""
    if options.compressed_segmentation_block_size is not None and encoding not in (
        None,
        "compressed_segmentation",
    ):
        raise OptionError(
            f"{{compressed_segmentation_block_size}} applies to {{encoding}}, not {encoding}",
            compressed_segmentation_block_size=NAMED,
            encoding="compressed_segmentation",
        )


def check_compression_level(options: ConvertOptions) -> None:
    """A compression level only with a compressor that takes one."""
    if options.compression_level is not None and options.compression == "none":
        raise OptionError(
            "{compression_level} applies to gzip, zstd or blosc, not {compression}",
            compression_level=NAMED,
            compression="none",
        )


def check_written_in(options: ConvertOptions, written: str, what: str) -> None:
    """Refuse a {format} other than `written`, the one format a dataset kind is stored in
    (`what` says whose: "annotations are")."""
    if options.format != written:
        raise PlanError(f"{what} {written} only (drop {{format}})", format=options.format)


def refuse_given(options: ConvertOptions, fields: Sequence[str], where: str) -> None:
    """Refuse the first of `fields` the user gave (not None) as one `where` ignores."""
    for name in fields:
        if getattr(options, name) is not None:
            raise OptionError(f"{{{name}}} applies to {where}", **{name: NAMED})
