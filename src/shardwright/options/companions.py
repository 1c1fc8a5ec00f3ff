"""The options of what a dataset carries beside its voxels: the meshes and skeletons its source
names, converted in the same job; annotations and segment properties from tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shardwright.common.flags import cli, enum_labels, parse_enum, parse_pair
from shardwright.common.option_checks import whole
from shardwright.errors import OptionError

ANNOTATION_TYPES = ("point", "line", "axis_aligned_bounding_box", "ellipsoid")
DEFAULT_ANNOTATION_LIMIT = 10_000


@dataclass(frozen=True)
class CompanionOptions:
    """What the dataset carries beside its voxels: its source's meshes and skeletons,
    annotations and segment properties from tables."""

    TITLE: ClassVar[str] = "meshes and skeletons converted, annotations and segment properties"

    # A precomputed segmentation's meshes / skeletons (the directories its info names),
    # converted to their sharded form in the same job.
    with_meshes: bool = field(
        default=False,
        metadata=cli(
            "--with-meshes",
            "also convert the meshes the segmentation's info names, to sharded meshes",
            switch=True,
        ),
    )
    with_skeletons: bool = field(
        default=False,
        metadata=cli(
            "--with-skeletons",
            "also convert the skeletons the segmentation's info names, to sharded skeletons",
            switch=True,
        ),
    )
    # Legacy single-resolution meshes have no sharded form: re-encode them as one-level
    # multi-resolution Draco meshes only when asked.
    legacy_to_multires: bool = field(
        default=False,
        metadata=cli(
            "--legacy-to-multires",
            "re-encode legacy single-resolution meshes (which have no sharded form) as "
            "multi-resolution Draco meshes with one level of detail",
            switch=True,
        ),
    )
    annotation_type: str | None = field(
        default=None,
        metadata=cli(
            "--annotation-type",
            "a table (.csv, .parquet) becomes precomputed annotations of this type; columns "
            "x,y,z (ax..bz for lines and boxes; x,y,z,rx,ry,rz for ellipsoids) in voxels of "
            "--resolution",
            choices=ANNOTATION_TYPES,
        ),
    )
    relationships: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=cli(
            "--relationship",
            "a relationship NAME whose COLUMN holds each row's segment id (0: none); repeat "
            "for several",
            parse=parse_pair,
            metavar="NAME=COLUMN",
            repeat=True,
        ),
    )
    properties: tuple[str, ...] | None = field(
        default=None,
        metadata=cli(
            "--property",
            "a table column kept as a property; COLUMN=VALUE writes VALUE (a number, or nan) "
            "where it is empty (repeat for several; default: every other numeric column)",
            metavar="COLUMN[=VALUE]",
            repeat=True,
        ),
    )
    enums: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=cli(
            "--enum",
            "a property shown by name: a text COLUMN (its texts become the names) or "
            "COLUMN=VALUE:NAME,... of whole numbers; repeat for several",
            parse=parse_enum,
            metavar="COLUMN[=VALUE:NAME,...]",
            repeat=True,
        ),
    )
    annotation_limit: int = field(
        default=DEFAULT_ANNOTATION_LIMIT,
        metadata=cli(
            "--annotation-limit",
            "annotations per cell of each spatial index level (Neuroglancer shows a sample "
            "of about this many per cell when zoomed out)",
            parse=int,
            metavar="N",
        ),
    )
    segment_properties: str | None = field(
        default=None,
        metadata=cli(
            "--segment-properties",
            "a table (.csv, .parquet: id, then label, description, tags, numbers) written as "
            "the segmentation's segment properties",
            metavar="TABLE",
        ),
    )

    def check_companions(self) -> None:
        """A relationship named once each, a positive limit, an enum's column once and its
        labels readable (whether a source takes them is the planner's to say)."""
        for name, form in (("relationships", "NAME=COLUMN"), ("enums", "COLUMN=VALUE:NAME,...")):
            for item in getattr(self, name):
                if not (isinstance(item, tuple) and len(item) == 2
                        and all(isinstance(part, str) for part in item)):  # fmt: skip
                    raise OptionError(f"{{{name}}}: each is a text {form} (or a pair of texts), "
                                      f"not {item!r}", **{name: getattr(self, name)})  # fmt: skip
        if self.properties is not None and not all(isinstance(p, str) for p in self.properties):
            raise OptionError("{properties}: each is a column's name", properties=self.properties)
        named = [name for name, _ in self.relationships]
        if len(set(named)) != len(named):
            raise OptionError("{relationships}: each relationship is named once",
                              relationships=self.relationships)  # fmt: skip
        if not whole(self.annotation_limit, 1):
            raise OptionError("{annotation_limit} must be a whole number, 1 or more",
                              annotation_limit=self.annotation_limit)  # fmt: skip
        columns = [column for column, _ in self.enums]
        if len(set(columns)) != len(columns):
            raise OptionError("{enums}: each column is named once", enums=self.enums)
        for column, spec in self.enums:
            try:
                enum_labels(spec) if spec else None
            except ValueError as exc:
                raise OptionError(f"{{enums}} of column {column!r}: {exc}", enums=spec) from None
