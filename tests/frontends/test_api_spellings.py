"""The Python API takes the command line's spellings of its options, read by the same parsers
the flags use ("2G", "64K", "4,4,40", "auto"), as a notebook passes them; a spelling neither
reads is one OptionError naming the parameter, never a bare TypeError or ValueError."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import shardwright
from shardwright.errors import OptionError

GiB, KiB = 1024**3, 1024


@pytest.fixture
def source(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "src.npy"
    np.save(path, (np.arange(32 * 32 * 32) % 251).astype(np.uint8).reshape(32, 32, 32))
    return str(path)


def test_the_api_reads_the_command_lines_spellings(source: str, tmp_path: pathlib.Path) -> None:
    dest = str(tmp_path / "out")
    spelled = shardwright.plan(
        source, dest, memory_budget="2G", target_shard_bytes="64K", resolution="4,4,40",
        chunk_size="16,16,16", mips="1", compression_level="3", timeout="30",
        storage_options='{"auto_mkdir": true}',
    )  # fmt: skip
    options = spelled.options
    assert options.memory_budget == 2 * GiB and options.target_shard_bytes == 64 * KiB
    assert options.resolution == (4.0, 4.0, 40.0) and options.chunk_size == (16, 16, 16)
    assert options.mips == 1 and options.compression_level == 3 and options.timeout == 30.0
    assert options.storage_options == {"auto_mkdir": True}
    as_values = shardwright.plan(
        source, dest, memory_budget=2 * GiB, target_shard_bytes=64 * KiB, resolution=(4, 4, 40),
        chunk_size=(16, 16, 16), mips=1, compression_level=3, timeout=30.0,
        storage_options={"auto_mkdir": True},
    )  # fmt: skip
    assert spelled.describe() == as_values.describe()
    manifest = shardwright.convert(spelled, scheduler="sync", progress=False, lease_timeout="60",
                                   workers="1")  # fmt: skip
    assert manifest.totals.shards >= 1


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"memory_budget": "lots"}, "memory_budget='lots': bad size 'lots' (e.g. 512M, 2G)"),
        ({"memory_budget": [1]}, "memory_budget=[1] must be bytes or a size such as 512M"),
        ({"memory_budget": "1M"}, "memory_budget=1048576 must be bytes or a size such as 512M, "
                                  "at least 16M"),
        ({"target_shard_bytes": 1.5}, "target_shard_bytes=1.5 must be bytes"),
        ({"resolution": "4,4"}, "resolution='4,4': expected three values x,y,z"),
        ({"chunk_size": "a,b,c"}, "chunk_size='a,b,c': bad x,y,z value"),
        ({"timeout": "soon"}, "timeout='soon': not a number"),
        ({"mips": "many"}, "mips='many': expected a number of levels or 'auto'"),
        ({"workers": "two"}, "workers='two': expected a whole number of at least 1"),
    ],
)  # fmt: skip
def test_a_spelling_no_parser_reads_names_the_parameter(
    source: str, tmp_path: pathlib.Path, values: dict[str, object], named: str
) -> None:
    with pytest.raises(OptionError) as refused:
        shardwright.convert(source, str(tmp_path / "out"), scheduler="sync", progress=False,
                            **values)  # fmt: skip
    assert named in str(refused.value)
    assert not (tmp_path / "out").exists()
