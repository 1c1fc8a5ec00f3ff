"""What a shard task returns (`Receipt`) and the manifest lists of each shard (`ShardEntry`):
the object it stored (or that every chunk was fill), whether a resumed run kept it, the
requests it made, its seconds. Below the engine that makes receipts and the lifecycle that
folds them into the manifest (lifecycle/manifest.py), so that neither imports the other for
them."""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shardwright.errors import ManifestError


@dataclass(frozen=True)
class ShardEntry:
    """One shard object of a dataset, as the manifest lists it."""

    key: str
    size: int
    crc32c: int
    chunks: int

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "crc32c": self.crc32c, "chunks": self.chunks}

    @classmethod
    def from_json(cls, entry: Any, where: str) -> ShardEntry:
        """A listed shard, checked: a key inside the dataset and counts in range."""
        if not isinstance(entry, dict):
            raise ManifestError(f"{where} is not an object")
        key = check_key(entry.get("key"), f"{where}.key")
        counts = []
        for name, limit in (("size", 2**64), ("crc32c", 2**32), ("chunks", 2**64)):
            value = entry.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
                raise ManifestError(f"{where}.{name} is {value!r}")
            counts.append(value)
        return cls(key, *counts)


@dataclass(frozen=True)
class Receipt:
    """What one shard task did: the object it stored (`empty`: every chunk was fill, so none
    is stored), whether a resumed run kept it (`resumed`), the object-store requests it made,
    its seconds, in a pyramid the level of its shard, and the source chunks it found absent
    and wrote as the fill value (`missing`, the first few named in `missing_examples`);
    `present`: generated objects' segments over the dust threshold that hash to the shard."""

    key: str
    size: int
    crc32c: int
    chunks: int
    empty: bool = False
    resumed: bool = False
    requests: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    level: int | None = None
    missing: int = 0
    missing_examples: tuple[str, ...] = ()
    present: int | None = None

    @classmethod
    def nothing_stored(cls, key: str) -> Receipt:
        """The receipt of a shard whose every chunk was fill: zarr stores no object at all."""
        return cls(key, 0, 0, 0, empty=True)

    @property
    def entry(self) -> ShardEntry:
        return ShardEntry(self.key, self.size, self.crc32c, self.chunks)

    def counting(self, requests: Mapping[str, int]) -> Receipt:
        """This receipt with `requests` added to its own."""
        return dataclasses.replace(self, requests=sum_requests([self.requests, requests]))

    def to_json(self) -> dict[str, Any]:
        out = {**self.entry.to_json(), "resumed": self.resumed, "empty": self.empty}
        out.update(requests=dict(self.requests), seconds=self.seconds)
        if self.missing:
            out.update(missing=self.missing, missing_examples=list(self.missing_examples))
        if self.present is not None:
            out.update(present=self.present)
        return out if self.level is None else {**out, "level": self.level}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Receipt:
        return cls(
            obj["key"],
            int(obj["size"]),
            int(obj["crc32c"]),
            int(obj["chunks"]),
            empty=bool(obj.get("empty", False)),
            resumed=bool(obj.get("resumed", False)),
            requests=dict(obj.get("requests", {})),
            seconds=float(obj.get("seconds", 0.0)),
            level=obj.get("level"),
            missing=int(obj.get("missing", 0)),
            missing_examples=tuple(str(k) for k in obj.get("missing_examples", ())),
            present=None if obj.get("present") is None else int(obj["present"]),
        )


def sum_requests(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Object-store requests (puts, gets, heads) and retries, summed by kind."""
    total: dict[str, int] = {}
    for requests in counts:
        for kind, n in requests.items():
            total[kind] = total.get(kind, 0) + n
    return total


def check_key(key: Any, where: str) -> str:
    """An object key inside the dataset: relative, '/'-separated, no '.' or '..' parts."""
    if not isinstance(key, str) or not key:
        raise ManifestError(f"{where} is {key!r}, not an object key")
    parts = key.split("/")
    if key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(f"{where} {key!r} is not a key inside the dataset")
    if posixpath.normpath(key) != key or ":" in parts[0]:
        raise ManifestError(f"{where} {key!r} is not a key inside the dataset")
    return key
