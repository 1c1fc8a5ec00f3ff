"""Objects as CloudVolume/CloudFiles store them: under a compression suffix, or compressed.

CloudFiles writes a local chunk `0-64_0-64_0-64` as `0-64_0-64_0-64.gz` (or `.br`, `.zstd`)
holding the compressed bytes, and an object-store chunk under its plain key with a
`Content-Encoding: gzip` (or `br`) header, which some clients undo (an HTTP client sending
Accept-Encoding, GCS's decompressive transcoding) and others do not (S3 hands back the stored
bytes). A reader cannot rely on either, so it takes what arrives and undoes a compression the
bytes themselves show: data its encoding recognizes is kept as it is, otherwise a gzip or zstd
header is undone, and brotli (which has no header) is tried last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from isal import igzip, isal_zlib

from shardwright.stores import Store

# The key forms tried in turn when the plain key is absent, the one that last found an object
# first: a volume is stored one way throughout, so a miss costs one request, not five.
SUFFIXES = ("", ".gz", ".br", ".zstd", ".zst")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class NotDecodable(ValueError):
    """Bytes that are neither the expected encoding nor a compressed form of it."""


def plain_bytes(data: bytes, recognized: Callable[[bytes], bool]) -> bytes:
    """`data` as its encoding stores it: as given when `recognized` says so, else with the
    compression its bytes show undone (gzip, zstd, then brotli); NotDecodable otherwise."""
    if recognized(data):
        return data
    for name, undo in _decompressors(data):
        try:
            unpacked = undo(data)
        except Exception:  # noqa: BLE001, S112 - not this compression: try the next
            continue
        if recognized(unpacked):
            return unpacked
        raise NotDecodable(f"{name}-compressed, but what it holds is not the chunk")
    raise NotDecodable(
        f"{len(data)} bytes that are neither the chunk's encoding nor a gzip, zstd or "
        "brotli-compressed form of it"
    )


def _decompressors(data: bytes) -> list[tuple[str, Callable[[bytes], bytes]]]:
    if data.startswith(GZIP_MAGIC):
        return [("gzip", _gunzip)]
    if data.startswith(ZSTD_MAGIC):
        return [("zstd", _unzstd)]
    return [("brotli", _unbrotli)]


def _gunzip(data: bytes) -> bytes:
    """One gzip member (as CloudFiles writes) through ISA-L's zlib interface: three times
    zlib's speed, and half as much again as igzip.decompress, which reads members through a
    stream and is kept for whatever follows a first member."""
    member = isal_zlib.decompressobj(wbits=31)
    out: bytes = member.decompress(data)
    if member.unused_data or not member.eof:
        return igzip.decompress(data)
    return out


def _unzstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 31)


def _unbrotli(data: bytes) -> bytes:
    import brotli

    return bytes(brotli.decompress(data))


class StoredObjects:
    """Whole objects below a store's root, read under whichever key form holds them."""

    def __init__(self, store: Store):
        self.store = store
        self._order = list(SUFFIXES)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.store,))

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        """Each key's stored bytes (as stored: see `plain_bytes`), None where no form of it
        exists. Object stores are asked concurrently, one batch per key form tried."""
        found: dict[str, bytes | None] = dict.fromkeys(keys)
        remaining = list(keys)
        order = list(self._order)
        for suffix in order:
            if not remaining:
                break
            fetched = self.store.read_many([key + suffix for key in remaining])
            hits = [key for key in remaining if fetched[key + suffix] is not None]
            for key in hits:
                found[key] = fetched[key + suffix]
            if hits and suffix != order[0]:
                self._order = [suffix, *(s for s in order if s != suffix)]
            remaining = [key for key in remaining if found[key] is None]
        return found

    def stored_form(self, key: str) -> str | None:
        """The key under which some form of `key` is stored, or None."""
        for suffix in SUFFIXES:
            if self.store.exists(key + suffix):
                return key + suffix
        return None
