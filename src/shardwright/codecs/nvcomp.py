"""nvCOMP batch compressors for the GPU engine: gzip members (precomputed and zarr3 gzip) and
zstd frames (zarr3 zstd), compressed on the device, one batched call per batch of chunks.

Their bytes are another encoder's than the CPU engine's; what they decode to is the same, which
the GPU tests check through the gzip and zstd libraries and TensorStore. The GPU engine uses
them by default (`engine.gpu.run_shard_gpu`: measured 10-18x faster than compressing on one
host thread). An nvCOMP `Codec` must not be shared between threads: each worker thread keeps
its own, per algorithm and device.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from shardwright.common.arrays import Array, exclusive_scan
from shardwright.errors import NvcompUnavailable
from shardwright.version import install_command

ALGORITHMS = {"gzip": "Gzip", "zstd": "Zstd"}
_CODECS = threading.local()


def nvcomp_module() -> Any:
    try:
        from nvidia import nvcomp
    except ImportError as exc:
        raise NvcompUnavailable(
            f"device compression needs nvCOMP: {install_command('gpu-cu13')} "
            f"(gpu-cu12 for CUDA 12) ({exc})"
        ) from None
    return nvcomp


def gzip_algorithm_type(level: int | None) -> int:
    """nvCOMP's Deflate/Gzip effort (0 fastest .. 5 densest) for a zlib-style level: the
    default and levels 1-3 take the high-throughput kind; higher levels denser kinds."""
    if level is None or level <= 3:
        return 1
    return 2 if level <= 5 else 4 if level <= 8 else 5


class NvcompCompressor:
    """A `BatchCompressor` running nvCOMP on the device: each segment of the buffer becomes
    one complete gzip member or zstd frame."""

    def __init__(self, codec: str, level: int | None = None):
        if codec not in ALGORITHMS:
            raise NvcompUnavailable(
                f"nvCOMP compresses {' and '.join(ALGORITHMS)} on the device, not {codec}"
            )
        self.algorithm = ALGORITHMS[codec]
        self.options: dict[str, Any] = (
            {"algorithm_type": gzip_algorithm_type(level)} if codec == "gzip" else {}
        )

    def _codec(self, xp: Any) -> Any:
        device = xp.cuda.Device().id
        key = (self.algorithm, tuple(sorted(self.options.items())), device)
        cache = _CODECS.__dict__.setdefault("codecs", {})
        if key not in cache:
            nvcomp = nvcomp_module()
            cache[key] = nvcomp.Codec(
                algorithm=self.algorithm,
                device_id=device,
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                **self.options,
            )
        return cache[key]

    def compress(
        self, xp: Any, buffer: Array, offsets: np.ndarray, sizes: np.ndarray
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        nvcomp = nvcomp_module()
        codec = self._codec(xp)
        stream = xp.cuda.get_current_stream().ptr
        data = xp.asarray(buffer, dtype=xp.uint8)
        segments = [
            data[start : start + size]
            for start, size in zip(offsets.tolist(), sizes.tolist(), strict=True)
        ]
        encoded = codec.encode(nvcomp.as_arrays(segments, cuda_stream=stream))
        out = [xp.asarray(encoded[i]).view(xp.uint8) for i in range(len(segments))]
        out_sizes = np.array([int(part.size) for part in out], dtype=np.int64)
        return xp.concatenate(out), np.asarray(exclusive_scan(np, out_sizes)), out_sizes
