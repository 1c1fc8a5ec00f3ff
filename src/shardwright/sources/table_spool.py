"""A table's ids and bounding boxes, kept on local disk while its plan is made.

The plan reads a table once, to check it (sources/tables.py). What its later passes need of
each row, the annotation's id and bounding box, is kept here, one file per column and
partition, so that each spatial level's pass reads a few bytes per row from local disk
instead of parsing the table again, and so that repeated ids are found one bucket of ids at a
time (ids hashed into as many buckets as the table has partitions): no pass holds every id.
The files live in a temporary folder of the planning process and go with `close()`.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: ids that share low bits still spread


@dataclass(frozen=True)
class RepeatedId:
    """An id two rows share: the id, and the first two rows holding it (counted from 0)."""

    id: int
    rows: tuple[int, int]


class TableSpool:
    """Per partition: its bounding boxes, its ids (when the table has an id column) and the
    same ids ordered by bucket with their rows, for the repeated-id check."""

    def __init__(self, buckets: int) -> None:
        self.buckets = max(1, buckets)
        self.root = Path(tempfile.mkdtemp(prefix="shardwright-table-"))

    def _path(self, number: int, column: str) -> Path:
        return self.root / f"{number:06d}-{column}.npy"

    def keep(
        self,
        number: int,
        ids: npt.NDArray[np.uint64] | None,
        low: npt.NDArray[np.float64],
        high: npt.NDArray[np.float64],
    ) -> None:
        """Partition `number`'s boxes and ids (None: ids are row numbers, known later).
        A point's box is its position: kept once."""
        np.save(self._path(number, "low"), low)
        if high is not low:
            np.save(self._path(number, "high"), high)
        if ids is None:
            return
        np.save(self._path(number, "ids"), ids)
        bucket = self._bucket(ids)
        order = np.argsort(bucket, kind="stable")
        np.save(self._path(number, "hashed"), ids[order])
        np.save(self._path(number, "rows"), order.astype(np.uint32))
        np.save(self._path(number, "buckets"),
                np.bincount(bucket, minlength=self.buckets).astype(np.int64))  # fmt: skip

    def _bucket(self, ids: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        with np.errstate(over="ignore"):
            mixed = (ids * _MIX) >> np.uint64(32)
        return (mixed % np.uint64(self.buckets)).astype(np.int64)

    def boxes(self, number: int) -> tuple[np.ndarray, np.ndarray]:
        """Partition `number`'s bounding boxes (low, high), mapped from disk."""
        low = np.load(self._path(number, "low"), mmap_mode="r")
        high_path = self._path(number, "high")
        return low, (np.load(high_path, mmap_mode="r") if high_path.exists() else low)

    def ids(self, number: int, first_row: int, rows: int) -> npt.NDArray[np.uint64]:
        """Partition `number`'s ids: kept ones, or row number + 1 (`first_row`: its first)."""
        path = self._path(number, "ids")
        if path.exists():
            return np.load(path, mmap_mode="r")
        return np.arange(first_row + 1, first_row + 1 + rows, dtype=np.uint64)

    def first_repeated_id(self, partition_rows: list[int]) -> RepeatedId | None:
        """The id whose second row comes first in the table, bucket by bucket; None when
        every id is its own (or the table has no id column)."""
        firsts = np.concatenate([[0], np.cumsum(partition_rows)[:-1]]).astype(np.int64)
        if not self._path(0, "ids").exists():
            return None
        parts = range(len(partition_rows))
        offsets = [np.concatenate([[0], np.cumsum(np.load(self._path(n, "buckets")))])
                   for n in parts]  # fmt: skip
        hashed = [np.load(self._path(n, "hashed"), mmap_mode="r") for n in parts]
        local_rows = [np.load(self._path(n, "rows"), mmap_mode="r") for n in parts]
        found: RepeatedId | None = None
        for bucket in range(self.buckets):
            ids, rows = [], []
            for number, first in enumerate(firsts.tolist()):
                start, stop = offsets[number][bucket], offsets[number][bucket + 1]
                ids.append(hashed[number][start:stop])
                rows.append(local_rows[number][start:stop].astype(np.int64) + first)
            if not ids:
                continue
            every_id, every_row = np.concatenate(ids), np.concatenate(rows)
            order = np.lexsort((every_row, every_id))
            every_id, every_row = every_id[order], every_row[order]
            again = np.flatnonzero(every_id[1:] == every_id[:-1]) + 1
            if not again.size:
                continue
            second = again[np.argmin(every_row[again])]
            first_of_id = int(np.searchsorted(every_id, every_id[second]))
            rows_of_id = (int(every_row[first_of_id]), int(every_row[second]))
            candidate = RepeatedId(int(every_id[second]), rows_of_id)
            if found is None or candidate.rows[1] < found.rows[1]:
                found = candidate
        return found

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
