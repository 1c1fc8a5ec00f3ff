"""What the GPU engine cannot run, refused at plan time with the reason (whether a GPU is
present is not asked: a laptop may plan for a GPU cluster)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardwright import api
from shardwright.errors import GpuUnavailable
from shardwright.planning import ConversionPlan
from shardwright.planning.capabilities import check_gpu_plan


def _plan(dtype: str = "uint8", **options: Any) -> ConversionPlan:
    volume: Any = np.zeros((8, 16, 16), dtype)
    plan = api.plan(volume, "/nowhere", chunk_size=(8, 8, 8), resolution=(1, 1, 1), **options)
    assert isinstance(plan, ConversionPlan)
    return plan


@pytest.mark.parametrize(
    "options",
    [{}, {"format": "zarr3"}, {"format": "zarr3", "compression": "zstd"}, {"mips": 1},
     {"dtype": "uint32"}, {"dtype": "uint64", "format": "zarr3"}],
)  # fmt: skip
def test_box_shards_of_raw_or_segmentation_chunks_and_zarr3_pass(
    options: dict[str, Any],
) -> None:
    plan = _plan(**options)
    check_gpu_plan(plan)
    assert plan.level_plan(plan.level_count - 1).layout.gpu_refusal() is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hash": "murmurhash3_x86_128"}, "needs spatial-box shards \\(identity hash\\)"),
        ({"preshift_bits": 0, "minishard_bits": 0, "shard_bits": 1}, "spatial-box shards"),
        ({"encoding": "jpeg"}, "encodes raw and compressed_segmentation; use the CPU engine "
                               "for jpeg"),
        ({"encoding": "png"}, "use the CPU engine for png"),
    ],
)  # fmt: skip
def test_what_the_gpu_cannot_encode_is_refused(options: dict[str, Any], message: str) -> None:
    plan = _plan(**options)
    with pytest.raises(GpuUnavailable, match=message):
        check_gpu_plan(plan)
