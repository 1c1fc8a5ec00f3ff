"""OME-Zarr 0.5 multiscales: the group `zarr.json` over zarr3 output's level arrays (one or
more; a segmentation's group also carries image-label metadata).

The group lists the axes (space axes in one length unit, nanometres unless the source named
another; a channel axis without unit) and, per level, the array's path and its coordinate
transformations: a scale (voxel size) and a translation placing voxel centres (level k's
voxel 0 summarises base voxels 0 .. f**k - 1, so its centre sits (f**k - 1) / 2 base voxels
in). Pure JSON: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

OME_VERSION = "0.5"


def multiscales_group(
    axes: str,
    datasets: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    method: str | None = None,
    label: bool = False,
    unit: str = "nanometer",
) -> dict[str, Any]:
    """The group document: `axes` letters in array order, `datasets` (path, scale,
    translation) from the finest level up, each vector in array order and in `unit`; `label`
    marks a segmentation (OME-Zarr image-label metadata: its values are labels, not
    intensities)."""
    multiscale: dict[str, Any] = {
        "axes": [_axis(a, unit) for a in axes],
        "datasets": [
            {
                "path": path,
                "coordinateTransformations": [
                    {"type": "scale", "scale": [_number(v) for v in scale]},
                    {"type": "translation", "translation": [_number(v) for v in shift]},
                ],
            }
            for path, scale, shift in datasets
        ],
    }
    if method is not None:
        multiscale["type"] = method
    ome: dict[str, Any] = {"version": OME_VERSION, "multiscales": [multiscale]}
    if label:
        ome["image-label"] = {}
    return {"zarr_format": 3, "node_type": "group", "attributes": {"ome": ome}}


def dataset_paths(group: Mapping[str, Any]) -> list[str] | None:
    """The level arrays' paths of a multiscales group document, finest first; None if the
    document is not one."""
    if group.get("node_type") != "group":
        return None
    attributes = group.get("attributes") or {}
    ome = attributes.get("ome", attributes)  # 0.5 nests under "ome"; 0.4 did not
    multiscales = ome.get("multiscales") if isinstance(ome, Mapping) else None
    if not multiscales:
        return None
    return [str(d["path"]) for d in multiscales[0].get("datasets", [])]


def added_dataset(path: str, scale: Sequence[float], shift: Sequence[float]) -> dict[str, Any]:
    """A level added to a group that exists (Zarr v3 or v2): its path, scale and translation,
    whole numbers as integers and the others as computed."""
    return {
        "path": path,
        "coordinateTransformations": [
            {"type": "scale", "scale": [_whole(v) for v in scale]},
            {"type": "translation", "translation": [_whole(v) for v in shift]},
        ],
    }


def _whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _axis(letter: str, unit: str) -> dict[str, str]:
    if letter == "c":
        return {"name": "c", "type": "channel"}
    return {"name": letter, "type": "space", "unit": unit}


def _number(value: float) -> int | float:
    """Whole numbers as integers; others to 12 significant digits, so that a voxel size
    converted between units (8 nm as 0.008 micrometer) is written as the source wrote it."""
    if float(value).is_integer():
        return int(value)
    return float(f"{float(value):.12g}")
