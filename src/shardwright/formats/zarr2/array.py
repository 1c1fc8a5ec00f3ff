"""Zarr v2 arrays as pure bytes: the `.zarray` of a level shardwright adds to an OME-Zarr 0.4
group, and the bytes of its chunks, one object each (Zarr v2 has no shards).

A level added beside the group's arrays is stored as they are: its data type, compressor,
fill value, memory order and chunk key separator are those of the array it is reduced from
(`Zarr2Array.like`), so that every reader of the group reads the new level as it reads the
others. The compressor is run through numcodecs, by the configuration the array names, as
zarr-python and TensorStore read it back; filters are not carried (the added level is stored
without any). Its plan and the engines' step are its driver's (`layout.py`, `producers.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np

SEPARATORS = (".", "/")
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def as_group_document(zattrs: Mapping[str, Any]) -> dict[str, Any]:
    """A Zarr v2 group's attributes (`.zattrs`) seen as a group document, as the OME-Zarr
    multiscales readers take one (`formats/zarr3/ome_zarr.dataset_paths`)."""
    return {"node_type": "group", "attributes": dict(zattrs)}


@dataclass(frozen=True)
class Zarr2Array:
    """A Zarr v2 array's metadata (`.zarray`), as shardwright writes it: no filters."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str  # numpy's type string, byte order included: "<u2", "|u1"
    compressor: Mapping[str, Any] | None  # numcodecs' configuration: {"id": "zstd", ...}
    fill_value: Any  # as the JSON has it: a number, "NaN", or None (no fill value)
    order: str = "C"
    dimension_separator: str = "."

    @classmethod
    def like(cls, zarray: Mapping[str, Any]) -> Zarr2Array:
        """An array stored as the array `zarray` describes (its shape and chunks until
        `sized`); ValueError naming what shardwright cannot write the same way."""
        if zarray.get("zarr_format") != 2:
            raise ValueError(f"zarr_format is {zarray.get('zarr_format')!r}, not 2")
        try:
            dtype = np.dtype(zarray.get("dtype"))
        except TypeError:
            raise ValueError(f"dtype {zarray.get('dtype')!r} is no numpy data type") from None
        if dtype.kind not in "biuf":
            raise ValueError(f"dtype {zarray.get('dtype')!r} is not a number type")
        compressor = zarray.get("compressor")
        if compressor is not None:
            try:
                numcodecs.get_codec(dict(compressor))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"compressor {compressor!r}: {exc}") from None
        order = zarray.get("order", "C")
        separator = zarray.get("dimension_separator") or "."
        if order not in ("C", "F") or separator not in SEPARATORS:
            raise ValueError(f"order {order!r} or dimension_separator {separator!r} is unknown")
        chunks = tuple(int(c) for c in zarray.get("chunks") or ())
        array = cls(chunks, chunks, str(zarray["dtype"]), compressor,
                    zarray.get("fill_value"), order, separator)  # fmt: skip
        array.fill()  # a fill value the data type cannot hold is refused here
        return array

    def sized(self, shape: Sequence[int], chunks: Sequence[int]) -> Zarr2Array:
        """This array's storage at another shape and chunk shape (another level)."""
        return Zarr2Array(tuple(shape), tuple(chunks), self.dtype, self.compressor,
                          self.fill_value, self.order, self.dimension_separator)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "zarr_format": 2,
            "shape": list(self.shape),
            "chunks": list(self.chunks),
            "dtype": self.dtype,
            "compressor": None if self.compressor is None else dict(self.compressor),
            "fill_value": self.fill_value,
            "order": self.order,
            "filters": None,
            "dimension_separator": self.dimension_separator,
        }

    def chunk_key(self, position: Sequence[int]) -> str:
        """A chunk's key in its array: its grid position joined by the separator."""
        return self.dimension_separator.join(str(int(p)) for p in position)

    def fill(self) -> np.ndarray | None:
        """The fill value as one element of the array's type (None: the array has none, so
        every chunk is stored)."""
        value = self.fill_value
        if value is None:
            return None
        value = SPECIAL_FLOATS.get(value, value) if isinstance(value, str) else value
        try:
            filled = np.array(value, dtype=np.dtype(self.dtype))
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"fill_value {self.fill_value!r} is no {self.dtype} value") from None
        if not (filled == value or (math.isnan(filled) and math.isnan(value))):
            raise ValueError(f"fill_value {self.fill_value!r} is no {self.dtype} value")
        return filled

    def encode(self, chunk: np.ndarray) -> bytes | None:
        """A whole chunk's object (in the array's axis order and chunk shape), or None where
        every element is the fill value: zarr stores no object for it."""
        fill = self.fill()
        if fill is not None:
            same = chunk == fill
            if np.dtype(self.dtype).kind == "f" and np.isnan(fill):
                same = np.isnan(chunk)
            if bool(same.all()):
                return None
        dtype = np.dtype(self.dtype)
        data = chunk.astype(dtype, copy=False).tobytes(order="F" if self.order == "F" else "C")
        if self.compressor is None:
            return data
        # As elements of the type, not bytes: blosc shuffles by the element's size.
        codec = numcodecs.get_codec(dict(self.compressor))
        return bytes(codec.encode(np.frombuffer(data, dtype)))
