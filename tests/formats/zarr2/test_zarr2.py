"""Zarr v2 arrays as shardwright stores the levels it adds to an OME-Zarr 0.4 group
(`formats/zarr2/array.py`): like the array they are reduced from, refused where they cannot
be, and every chunk object read back by zarr-python (an independent reader) as the values
written."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

from shardwright.formats.zarr2.array import Zarr2Array

ZSTD = {"id": "zstd", "level": 0}
BLOSC = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}


def _zarray(**changed: Any) -> dict[str, Any]:
    return {"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<u2",
            "compressor": ZSTD, "fill_value": 0, "order": "C", "filters": None,
            "dimension_separator": "/", **changed}  # fmt: skip


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"zarr_format": 3}, "zarr_format is 3"),
        ({"dtype": "|O"}, "not a number type"),
        ({"dtype": "<nonesuch"}, "no numpy data type"),
        ({"compressor": {"id": "nonesuch"}}, "compressor"),
        ({"fill_value": 70000}, "fill_value 70000 is no <u2 value"),
        ({"fill_value": 0.5}, "fill_value 0.5 is no <u2 value"),
        ({"order": "X"}, "order 'X'"),
        ({"dimension_separator": "-"}, "dimension_separator '-'"),
    ],
)
def test_what_cannot_be_stored_alike_is_named(changed: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Zarr2Array.like(_zarray(**changed))


@pytest.mark.parametrize(
    ("dtype", "compressor", "order", "separator", "fill"),
    [
        ("<u2", ZSTD, "C", "/", 0),
        (">i4", BLOSC, "F", ".", -1),
        ("<f4", {"id": "gzip", "level": 5}, "C", ".", "NaN"),
        ("|u1", None, "C", "/", None),
    ],
)
def test_chunks_read_back_by_zarr_python(
    tmp_path: pathlib.Path, dtype: str, compressor: Any, order: str, separator: str, fill: Any
) -> None:
    """The `.zarray` and chunk objects, written by hand where their keys say: zarr-python
    reads every value; a chunk of the fill value alone is not stored (but where the array has
    no fill value); an edge chunk is whole, its outside the fill value."""
    import zarr

    template = Zarr2Array.like(_zarray(dtype=dtype, compressor=compressor, order=order,
                                       dimension_separator=separator, fill_value=fill))  # fmt: skip
    array = template.sized((5, 6), (2, 3))
    values = np.arange(30, dtype=np.dtype(dtype)).reshape(5, 6) + 1
    values[0:2, 0:3] = 0 if fill is None else array.fill()
    folder = tmp_path / "level"
    folder.mkdir()
    (folder / ".zarray").write_text(json.dumps(array.to_json()))
    stored = []
    for i in range(3):
        for j in range(2):
            chunk = np.full((2, 3), 0 if fill is None else array.fill(), dtype=values.dtype)
            part = values[2 * i : 2 * i + 2, 3 * j : 3 * j + 3]
            chunk[: part.shape[0], : part.shape[1]] = part
            data = array.encode(chunk)
            if data is None:
                continue
            key = folder / array.chunk_key((i, j))
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_bytes(data)
            stored.append(array.chunk_key((i, j)))
    read = zarr.open_array(str(folder), mode="r", zarr_format=2)[...]
    np.testing.assert_array_equal(read, values)
    assert len(stored) == (6 if fill is None else 5)
    assert f"0{separator}1" in stored and (fill is None) == (f"0{separator}0" in stored)
