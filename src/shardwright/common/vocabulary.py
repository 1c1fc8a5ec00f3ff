"""The closed sets of names that the formats, the options and the manifest share, each
defined once: an output format, the kind of dataset a job writes, a sharding hash, where a
zarr3 shard's index lies, a volume's type, blosc's compressors and shuffles.

They are `StrEnum`s, so a member equals its name (`OutputFormat.ZARR3 == "zarr3"`) and a
plain string from a user, a JSON document or a command line compares with them directly;
`names` gives the plain strings, in the order shown to users (the default first).
"""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    PRECOMPUTED = "precomputed"  # neuroglancer_uint64_sharded_v1
    ZARR3 = "zarr3"  # sharding_indexed
    ZARR2 = "zarr2"  # unsharded: only levels added to an OME-Zarr 0.4 group, never converted to


# The formats a conversion never writes (`--format` does not offer them).
ADDED_ONLY_FORMATS = (OutputFormat.ZARR2,)


class DatasetKind(StrEnum):
    """What a job writes (`Plan.dataset`, the manifest's `dataset`)."""

    VOLUME = "volume"
    OBJECTS = "objects"  # meshes or skeletons converted
    GENERATED = "generated"  # meshes or skeletons made from the volume by the same job
    ANNOTATIONS = "annotations"  # from a table
    ADDITION = "addition"  # added to a dataset that exists


class ShardHash(StrEnum):
    """How a precomputed chunk or object id is hashed to its shard."""

    IDENTITY = "identity"
    MURMURHASH3_X86_128 = "murmurhash3_x86_128"


class IndexLocation(StrEnum):
    """Where a zarr3 shard keeps its index."""

    END = "end"
    START = "start"


class VolumeType(StrEnum):
    """A precomputed volume's `type`."""

    IMAGE = "image"
    SEGMENTATION = "segmentation"


class BloscName(StrEnum):
    """blosc's inner compressors (zarr3 `blosc` codec `cname`)."""

    BLOSCLZ = "blosclz"
    LZ4 = "lz4"
    LZ4HC = "lz4hc"
    ZLIB = "zlib"
    ZSTD = "zstd"


class BloscShuffle(StrEnum):
    NOSHUFFLE = "noshuffle"
    SHUFFLE = "shuffle"
    BITSHUFFLE = "bitshuffle"


def names(kind: type[StrEnum]) -> tuple[str, ...]:
    """The plain strings of a set, in its order (for messages and command-line choices)."""
    return tuple(member.value for member in kind)
