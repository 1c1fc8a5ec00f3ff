"""A table as labs hand it over: a CSV or Parquet file, a pandas or Dask DataFrame."""

from __future__ import annotations

import pathlib
from typing import Any

import dask.dataframe as dd
import pandas as pd

FORMS = ["csv", "parquet", "pandas", "dask"]


def table_as(form: str, frame: pd.DataFrame, folder: pathlib.Path, name: str = "table") -> Any:
    """`frame` in one of FORMS: a file written in `folder`, or a DataFrame (Dask's in
    several partitions)."""
    if form == "csv":
        frame.to_csv(folder / f"{name}.csv", index=False)
        return str(folder / f"{name}.csv")
    if form == "parquet":
        frame.to_parquet(folder / f"{name}.parquet", index=False)
        return str(folder / f"{name}.parquet")
    if form == "dask":
        return dd.from_pandas(frame, npartitions=3)
    return frame
