"""What the user asked to read: one frozen value every reader takes, whatever its format."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from shardwright.errors import SourceError


@dataclass(frozen=True)
class SourceRequest:
    """A source to open: its URL and the options that say how to read it.

    `axes` gives the array's own axis order where its metadata does not; `scale_key` picks a
    precomputed scale, OME-Zarr dataset or N5 scale; `storage_options` (fsspec-style:
    endpoint_url, ...) apply to gs:// and s3:// URLs; `fill_missing` writes the fill value
    where a precomputed chunk or a TIFF slice is absent instead of refusing.
    """

    url: str
    axes: str | None = None
    scale_key: str | None = None
    storage_options: dict[str, Any] | None = None
    fill_missing: bool = False

    def at(self, url: str, *, scale_key: str | None = None) -> SourceRequest:
        """The same request for a node inside this one (an OME-Zarr dataset, an N5 scale):
        the scale is then chosen, so none is asked of it unless given."""
        return dataclasses.replace(self, url=url, scale_key=scale_key)

    def refuse_scales(self, what: str) -> None:
        """One line when a scale was asked of a source that has none."""
        if self.scale_key is not None:
            raise SourceError(
                f"{self.url}: {what} has no scales; scale_key applies to precomputed and "
                "OME-Zarr sources"
            )
