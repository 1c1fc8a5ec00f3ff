"""OME-Zarr 0.4 and 0.5 multiscales read as a source: which array, its axes, where it sits in
space and whether it holds labels.

Placement. A dataset's `coordinateTransformations` (a scale, then a translation), followed by
the multiscale's own, map an array index to a physical position: `scale * index +
translation`, in the unit of each axis. OME puts that position at the voxel's centre;
precomputed's `voxel_offset` names the voxel's corner (Neuroglancer draws OME layers half a
voxel lower than precomputed ones of the same numbers). shardwright carries the numbers as
CloudVolume does, `voxel_offset * resolution = translation`, for the finest dataset, and places a
coarser dataset k the same way relative to it: its voxel 0, centred at `translation_k`, spans
from `translation_k - (scale_k - scale_0) / 2` in the finest dataset's convention, so
`offset_k = translation_k / scale_k - centring_k` with `centring_k = (scale_k - scale_0) / 2 /
scale_k` voxels. That gives back exactly the offsets of the pyramids shardwright, ome-zarr-py
and Igneous write (`formats/zarr3/ome_zarr.py`); the centring travels as `subvoxel_offset`, so that
OME-Zarr output of dataset k keeps its translation exactly (precomputed has no place for it).
A translation that is not a whole number of voxels, or a transform other than scale and
translation, cannot be carried: the plan refuses it unless `--voxel-offset` (and, for other
transforms, `--resolution`) replaces it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardwright.common.downsample import factor_between
from shardwright.errors import SourceError
from shardwright.sources.base import SourceHints, axes_from_names
from shardwright.sources.units import nm_per

Affine = tuple[list[float], list[float]]  # (scale, translation) per array dimension
WHOLE = 1e-6  # a voxel count this close to an integer is that integer (float noise, not data)


@dataclass(frozen=True)
class Multiscale:
    """The chosen dataset of an OME-Zarr multiscales group: its path in the group, the group's
    axes (letters x, y, z, c, t; None where they are other names), and what places it."""

    url: str
    path: str
    axes: str | None
    units: tuple[Any, ...]
    chosen: Affine | None  # None: its transforms are not a scale and a translation
    finest: Affine | None
    refusal: str | None  # why, then
    where: str  # "OME-Zarr 0.4 dataset '1'"
    label: bool  # image-label: its values are segment ids
    # The scales of the chosen dataset and the next (or, for the coarsest, the one before and
    # it), finer first: the group's own pyramid step. None: a single dataset, or not placed.
    step: tuple[list[float], list[float]] | None = None

    def lengths(self, axes: str) -> list[float] | None:
        """Nanometres per unit along x, y, z: each space axis's unit, or 1 for every axis where
        none names a unit (its scale is then the voxel size in nm). None where a unit is no
        length, or some axes name one and others none (nothing says what the others are in).
        A 2-D image (no z) takes the unit of x for its one slice."""
        units = [self.units[axes.index(a)] if a in axes else None for a in "xyz"]
        if "z" not in axes:
            units[2] = units[0]
        if all(u is None for u in units):
            return [1.0, 1.0, 1.0]
        factors = [nm_per(u) for u in units]
        return [f for f in factors if f is not None] if None not in factors else None

    def unitless(self, axes: str) -> bool:
        """Whether no space axis names a unit (the scale is read as nanometres)."""
        return all(self.units[axes.index(a)] is None for a in "xyz" if a in axes)

    def factor(self, axes: str) -> tuple[int, int, int] | None:
        """The factor (x, y, z) between the group's own levels around the chosen one."""
        if self.step is None:
            return None
        finer, coarser = (_xyz(scale, axes, 1.0) for scale in self.step)
        return factor_between(finer, coarser)

    def physical(self, axes: str) -> Affine | None:
        """The chosen dataset's voxel size and translation in nm, x, y, z; None where its
        transforms or units do not say. A 2-D image's one slice is as thick as its finest
        pixel side, at 0."""
        lengths = self.lengths(axes) if len(self.units) == len(axes) else None
        if self.chosen is None or lengths is None:
            return None
        scale, shift = _xyz(self.chosen[0], axes), _xyz(self.chosen[1], axes, 0.0)
        return (
            [v * f for v, f in zip(scale, lengths, strict=True)],
            [v * f for v, f in zip(shift, lengths, strict=True)],
        )

    def hints(self, axes: str) -> SourceHints:
        """Voxel size (nm), offset (voxels), unit and layer type of the array read with
        `axes` (each letter naming the array dimension the transforms' numbers belong to)."""
        layer_type = "segmentation" if self.label else None
        if self.chosen is None or self.finest is None or len(self.units) != len(axes):
            return SourceHints(
                layer_type=layer_type,
                placed_by=self.where if self.refusal else None,
                resolution_refusal=self.refusal,
                offset_refusal=self.refusal,
            )
        scale, shift = _xyz(self.chosen[0], axes), _xyz(self.chosen[1], axes, 0.0)
        finest_scale = _xyz(self.finest[0], axes, scale[2])  # a 2-D image: no centring in z
        unit = _shared_unit([self.units[axes.index(a)] for a in "xyz" if a in axes])
        where = self.where
        if self.unitless(axes):
            where += " (no unit: read as nm)"
        base = SourceHints(
            layer_type=layer_type,
            unit=unit,
            placed_by=where,
            pyramid_factor=self.factor(axes),
        )
        if any(v <= 0 for v in scale):
            refusal = f"{self.url}: {self.where}: its scale {self.chosen[0]} is not positive"
            return replace(base, resolution_refusal=refusal, offset_refusal=refusal)
        physical = self.physical(axes)
        if physical is not None:
            x, y, z = physical[0]
            base = replace(base, resolution=(x, y, z))
        else:
            named = ", ".join(f"{a} {self.units[axes.index(a)]!r}" for a in "xyz" if a in axes)
            base = replace(
                base,
                resolution_refusal=(
                    f"{self.url}: {self.where}: its axes' units ({named}) do not all name a "
                    "length; give the voxel size (x,y,z in nanometres) with {resolution}"
                ),
            )
        offset, centring = [], []
        for i, a in enumerate("xyz"):
            centring.append((scale[i] - finest_scale[i]) / 2 / scale[i])
            voxels = shift[i] / scale[i] - centring[-1]
            if abs(voxels - round(voxels)) > WHOLE:
                return replace(
                    base,
                    offset_refusal=(
                        f"{self.url}: {self.where}: its translation places voxel 0 at "
                        f"{voxels:g} voxels along {a}, not a whole number of voxels (an offset "
                        "is an integer); give the offset with {voxel_offset}"
                    ),
                )
            offset.append(round(voxels))
        return replace(
            base,
            voxel_offset=(offset[0], offset[1], offset[2]),
            subvoxel_offset=(centring[0], centring[1], centring[2]),
        )


def _xyz(values: Sequence[float], axes: str, z: float | None = None) -> list[float]:
    """Per-dimension values (a scale, a translation) as x, y, z; a 2-D image's missing z is
    `z`, by default the finer of x and y (its one slice as thick as a pixel is wide)."""
    x, y = (float(values[axes.index(a)]) for a in "xy")
    if "z" in axes:
        return [x, y, float(values[axes.index("z")])]
    return [x, y, min(x, y) if z is None else z]


def has_multiscales(attributes: dict[str, Any]) -> bool:
    """Whether a group's attributes (0.4, or 0.5 under "ome") list multiscales."""
    nested = attributes.get("ome")
    return bool((nested if isinstance(nested, dict) else attributes).get("multiscales"))


def multiscale(url: str, attributes: dict[str, Any], scale_key: str | None) -> Multiscale:
    """The dataset `scale_key` (default: the finest) of the OME-Zarr group at `url`."""
    nested = attributes.get("ome")  # 0.5 nests its metadata under "ome"; 0.4 did not
    ome: dict[str, Any] = nested if isinstance(nested, dict) else attributes
    multiscales = ome.get("multiscales")
    if not multiscales or not isinstance(multiscales, list):
        raise SourceError(
            f"{url}: a zarr group without OME-Zarr multiscales; name one of its arrays"
        )
    entry = multiscales[0]
    version = ome.get("version") or entry.get("version") or "0.4"
    datasets = entry.get("datasets") or []
    if not datasets:
        raise SourceError(f"{url}: the OME-Zarr multiscales list no datasets")
    paths = [str(d.get("path")) for d in datasets]
    if scale_key is None:
        index = 0
    elif scale_key.strip("/") in paths:
        index = paths.index(scale_key.strip("/"))
    else:
        raise SourceError(
            f"{url}: no multiscale dataset {scale_key!r}; datasets are {', '.join(paths)}"
        )
    axis_entries = [a if isinstance(a, dict) else {"name": a} for a in entry.get("axes") or []]
    rank = len(axis_entries)
    where = f"OME-Zarr {version} dataset {paths[index]!r}"
    outer = entry.get("coordinateTransformations")
    chosen = finest = refusal = step = None
    try:
        finest = _compose(datasets[0].get("coordinateTransformations"), outer, rank)
        chosen = _compose(datasets[index].get("coordinateTransformations"), outer, rank)
    except _Unplaceable as exc:
        refusal = f"{url}: {where}: {exc}"
    if chosen is not None and len(datasets) > 1:  # the group's own step, around the chosen
        pair = (index, index + 1) if index + 1 < len(datasets) else (index - 1, index)
        try:
            finer, coarser = (
                _compose(datasets[k].get("coordinateTransformations"), outer, rank)[0] for k in pair
            )
            step = (finer, coarser)
        except _Unplaceable:
            step = None  # a neighbour not placed: no step to follow
    return Multiscale(
        url=url,
        path=paths[index],
        axes=axes_from_names([_letter(a) for a in axis_entries]),
        units=tuple(a.get("unit") for a in axis_entries),
        chosen=chosen,
        finest=finest,
        refusal=refusal,
        where=where,
        label="image-label" in ome or "image-label" in attributes,
        step=step,
    )


def _letter(axis: dict[str, Any]) -> str:
    """An OME axis as an axis letter: channel c, time t, a space axis by its name."""
    kind = axis.get("type")
    if kind == "channel":
        return "c"
    if kind == "time":
        return "t"
    return str(axis.get("name", "?")).lower()


class _Unplaceable(Exception):
    """A transform that is not a scale and a translation."""


def _compose(transforms: Any, outer: Any, rank: int) -> Affine:
    """The dataset's transforms, then the multiscale's, as one scale and translation."""
    scale, shift = [1.0] * rank, [0.0] * rank
    for listed in (transforms, outer):
        for transform in listed if isinstance(listed, list) else []:
            kind = transform.get("type") if isinstance(transform, dict) else None
            if kind == "identity":
                continue
            if kind not in ("scale", "translation"):
                raise _Unplaceable(
                    f"a {kind!r} coordinate transformation is not a scale and translation "
                    "(rotations, affines and shears cannot be written as a voxel size and "
                    "offset); give the placement with {resolution} and {voxel_offset}"
                )
            values = transform.get(kind)
            numbers = _numbers(values, rank)
            if numbers is None:
                raise _Unplaceable(
                    f"its {kind} {values!r} does not give one finite number per axis ({rank})"
                )
            if kind == "scale":
                scale = [s * v for s, v in zip(scale, numbers, strict=True)]
                shift = [t * v for t, v in zip(shift, numbers, strict=True)]
            else:
                shift = [t + v for t, v in zip(shift, numbers, strict=True)]
    return scale, shift


def dataset_affine(dataset: dict[str, Any], rank: int) -> Affine:
    """One dataset's own scale and translation (none: 1 and 0), one number per axis; the
    group's were checked when it was opened (`multiscale`), so a transform that is no scale
    and translation is a SourceError here."""
    try:
        return _compose(dataset.get("coordinateTransformations"), None, rank)
    except _Unplaceable:
        raise SourceError(
            f"dataset {dataset.get('path')!r}: its transforms are not a scale and a translation"
        ) from None


def _numbers(values: Any, rank: int) -> list[float] | None:
    """`rank` finite numbers (a path to binary transform data, or a text, is none)."""
    if not isinstance(values, list) or len(values) != rank:
        return None
    try:
        numbers = [float(v) for v in values]
    except (TypeError, ValueError):
        return None
    return numbers if all(math.isfinite(n) for n in numbers) else None


def _shared_unit(units: Sequence[Any]) -> str | None:
    """The one length unit the space axes share, if they do."""
    names = set(units)
    if len(names) != 1:
        return None
    (name,) = names
    return name if nm_per(name) is not None else None
