"""The options of where a job reads and writes: the source's axes and scale, what its absent
chunks become, how long a store may keep silent, each store's fsspec options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from shardwright.common.deadlines import DEFAULT_TIMEOUT
from shardwright.common.flags import cli, parse_json_object
from shardwright.errors import NAMED, OptionError


@dataclass(frozen=True)
class StoreOptions:
    """The source as read and the stores: axes, scale, absent chunks, timeouts, fsspec."""

    TITLE: ClassVar[str] = "the source and the stores"

    source_axes: str | None = field(
        default=None,
        metadata=cli(
            "--source-axes",
            "axis order of an array source: x, y, z, c (channels), t (one time point), e.g. "
            "zyx, xyz, czyx, tczyx (default: its metadata's, else zyx / czyx / tczyx)",
        ),
    )
    source_scale: str | None = field(
        default=None,
        metadata=cli(
            "--source-scale",
            "precomputed scale key, OME-Zarr dataset path or N5 scale (default: the finest)",
        ),
    )
    fill_missing: bool = field(
        default=False,
        metadata=cli(
            "--fill-missing",
            "write the fill value (0) where the source has no chunk (precomputed) or a TIFF "
            "stack skips a slice, instead of refusing; the job counts them",
            switch=True,
        ),
    )
    timeout: float = field(
        default=DEFAULT_TIMEOUT,
        metadata=cli(
            "--timeout",
            "seconds to wait for a store (S3, GCS, HTTP) that does not answer before giving "
            "up, and for each stalled request",
            parse=float,
            metavar="SECONDS",
        ),
    )
    # fsspec options (credentials among them): never shown in reprs, logs or the dashboard.
    storage_options: dict[str, Any] = field(  # the destination's
        default_factory=dict,
        repr=False,
        metadata=cli(
            "--storage-options",
            "fsspec options for the destination (credentials, endpoint_url, ...)",
            parse=parse_json_object,
            metavar="JSON",
        ),
    )
    source_storage_options: dict[str, Any] = field(
        default_factory=dict,
        repr=False,
        metadata=cli(
            "--source-storage-options",
            "options for a gs:// or s3:// source (e.g. an endpoint_url)",
            parse=parse_json_object,
            metavar="JSON",
        ),
    )

    def check_stores(self) -> None:
        """Both stores' fsspec options are dicts; the timeout a positive number of seconds."""
        for name in ("storage_options", "source_storage_options"):
            if not isinstance(value := getattr(self, name), dict):
                raise OptionError(f"{{{name}}} must be a dict of fsspec options, not "
                                  f"{type(value).__name__}", **{name: NAMED})  # fmt: skip
        if not self.timeout > 0:
            raise OptionError(
                "{timeout} must be a positive number of seconds", timeout=self.timeout
            )
