"""The options of the meshes and skeletons a job makes from a segmentation (a group of
`ConvertOptions`' fields, checked here): which objects, the block grid they are made on, how
surfaces are simplified, and TEASAR's parameters with the field's defaults (those of Igneous's
`skeleton forge`, in nm, so that they follow the voxel size)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from shardwright.common.flags import XYZ, cli, parse_ids, parse_mips, parse_xyz
from shardwright.common.option_checks import whole
from shardwright.errors import NAMED, OptionError

# TEASAR's parameters a lab tunes (kimimaro's names), with the field's defaults: those of
# Igneous's `skeleton forge`, in nm, so that they follow the voxel size.
TEASAR_DEFAULTS = {
    "scale": 4.0,  # a path invalidates a ball of scale x radius + const around it
    "const": 10.0,
    "soma_detection_threshold": 1100.0,
    "soma_acceptance_threshold": 3500.0,
    "soma_invalidation_scale": 1.0,
    "soma_invalidation_const": 300.0,
}

# TEASAR's parameters a lab tunes: option field -> (kimimaro's name, what it is); their
# defaults are the field's (TEASAR_DEFAULTS).
TEASAR_FIELDS = {
    "teasar_scale": ("scale", "each path invalidates a ball of scale x radius + const"),
    "teasar_const": ("const", "the ball's constant (nm)"),
    "soma_detection_threshold": ("soma_detection_threshold",
                                 "a radius (nm) above which a soma is looked for"),
    "soma_acceptance_threshold": ("soma_acceptance_threshold",
                                  "a radius (nm) above which it is taken as a soma"),
    "soma_invalidation_scale": ("soma_invalidation_scale", "a soma's ball scale"),
    "soma_invalidation_const": ("soma_invalidation_const", "a soma's ball constant (nm)"),
}  # fmt: skip


def _teasar(name: str, unit: str) -> Any:
    kimimaro_name, meaning = TEASAR_FIELDS[name]
    default = TEASAR_DEFAULTS[kimimaro_name]
    return field(
        default=default,
        metadata=cli(
            "--" + name.replace("_", "-"),
            f"TEASAR {kimimaro_name}: {meaning} (default {default:g})",
            parse=float,
            metavar=unit,
        ),
    )


@dataclass(frozen=True)
class ObjectOptions:
    """Meshes and skeletons made from the segmentation itself, in the same job."""

    TITLE: ClassVar[str] = "meshes and skeletons made from the segmentation"

    generate_meshes: bool = field(
        default=False,
        metadata=cli(
            "--generate-meshes",
            "also make multi-resolution meshes of the segmentation's objects (DEST/mesh)",
            switch=True,
        ),
    )
    generate_skeletons: bool = field(
        default=False,
        metadata=cli(
            "--generate-skeletons",
            "also make TEASAR skeletons of the segmentation's objects (DEST/skeletons)",
            switch=True,
        ),
    )
    mesh_max_error: float | None = field(
        default=None,
        metadata=cli(
            "--mesh-max-error",
            "how far (nm) simplification may move a surface at the finest level of detail "
            "(default: the smallest voxel dimension); each coarser level doubles it",
            parse=float,
            metavar="NM",
        ),
    )
    mesh_lods: int | str = field(
        default="auto",
        metadata=cli(
            "--mesh-lods",
            "levels of detail per mesh; auto: until one fragment covers the object",
            parse=parse_mips,
            metavar="N|auto",
        ),
    )
    mesh_level: int = field(
        default=0,
        metadata=cli(
            "--mesh-level",
            "the pyramid level meshes and skeletons are made from (default 0: the finest)",
            parse=int,
            metavar="LEVEL",
        ),
    )
    mesh_block: tuple[int, int, int] | None = field(
        default=None,
        metadata=cli(
            "--mesh-block",
            "voxels per block task and finest mesh fragment (default 128,128,128)",
            parse=parse_xyz(int),
            metavar=XYZ,
        ),
    )
    dust_threshold: int = field(
        default=0,
        metadata=cli(
            "--dust-threshold",
            "objects of fewer voxels get no mesh or skeleton (default 0: every object)",
            parse=int,
            metavar="VOXELS",
        ),
    )
    object_ids: tuple[int, ...] | None = field(
        default=None,
        metadata=cli(
            "--object-ids",
            "mesh / skeletonize only these segment ids (comma-separated)",
            parse=parse_ids,
            metavar="ID,ID,...",
        ),
    )
    teasar_scale: float = _teasar("teasar_scale", "X")
    teasar_const: float = _teasar("teasar_const", "NM")
    soma_detection_threshold: float = _teasar("soma_detection_threshold", "NM")
    soma_acceptance_threshold: float = _teasar("soma_acceptance_threshold", "NM")
    soma_invalidation_scale: float = _teasar("soma_invalidation_scale", "X")
    soma_invalidation_const: float = _teasar("soma_invalidation_const", "NM")
    tick_threshold: float = field(
        default=0.0,
        metadata=cli(
            "--tick-threshold",
            "remove skeleton branches shorter than this (nm), shortest first, as Igneous's "
            "merge does (its default 3500); default 0: every branch one TEASAR pass makes",
            parse=float,
            metavar="NM",
        ),
    )

    def teasar(self) -> dict[str, float]:
        """The TEASAR parameters asked for, by kimimaro's names."""
        return {kimimaro_name: float(getattr(self, name))
                for name, (kimimaro_name, _) in TEASAR_FIELDS.items()}  # fmt: skip

    def check_objects(self) -> None:
        """The values the mesh and skeleton options can take."""
        error, lods, block, ids = (
            self.mesh_max_error,
            self.mesh_lods,
            self.mesh_block,
            self.object_ids,
        )
        if error is not None and not (isinstance(error, int | float) and 0 <= error < float("inf")):
            raise OptionError("{mesh_max_error} must be a distance in nm, 0 or more",
                              mesh_max_error=error)  # fmt: skip
        if lods != "auto" and not whole(lods, 1):
            raise OptionError("{mesh_lods} must be a number of levels (1 or more) or 'auto'",
                              mesh_lods=lods)  # fmt: skip
        for name in ("mesh_level", "dust_threshold"):
            if not whole(getattr(self, name), 0):
                raise OptionError(f"{{{name}}} must be a whole number, 0 or more",
                                  **{name: getattr(self, name)})  # fmt: skip
        if block is not None and (len(block) != 3 or not all(whole(n, 2) for n in block)):
            raise OptionError("{mesh_block} must be three whole numbers of 2 or more",
                              mesh_block=block)  # fmt: skip
        if ids is not None and (not ids or not all(whole(i, 1) and i < 2**64 for i in ids)):
            raise OptionError("{object_ids} must be segment ids from 1 to 2**64 - 1",
                              object_ids=ids)  # fmt: skip
        for name in (*TEASAR_FIELDS, "tick_threshold"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0 <= value < float("inf"))
            ):
                raise OptionError(f"{{{name}}} must be a number, 0 or more", **{name: value})
        tuned = [name for name in (*TEASAR_FIELDS, "tick_threshold")
                 if getattr(self, name) != OBJECT_DEFAULTS[name]]  # fmt: skip
        if tuned and not self.generate_skeletons:
            raise OptionError(
                "{" + "} / {".join(tuned) + "} tune the skeletons: add {generate_skeletons}",
                generate_skeletons=NAMED, **{name: getattr(self, name) for name in tuned},
            )  # fmt: skip


OBJECT_DEFAULTS = {f.name: f.default for f in fields(ObjectOptions)}
