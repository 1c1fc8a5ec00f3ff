"""Build the optional C extensions; everything else is declared in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds; compressed_segmentation
falls back to the reference library and pyramid reductions to NumPy (same bytes, slower),
TEASAR's invalidation to kimimaro's own (slower; the same skeletons but where two path
vertices reach a voxel at the same distance: generation/invalidation.py), TEASAR's distance
field to dijkstra3d's (the same field, slower: generation/distance.py).
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "shardwright.codecs._cseg",
            ["src/shardwright/codecs/_cseg.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3"],
        ),
        Extension(
            "shardwright.generation._invalidation",
            ["src/shardwright/generation/_invalidation.c"],
            optional=True,
            # no fused multiply-add: each distance rounds as kimimaro's does
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
        ),
        Extension(
            "shardwright.generation._distance",
            ["src/shardwright/generation/_distance.c"],
            optional=True,
            # no fused multiply-add: each distance rounds as dijkstra3d's does
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
        ),
        Extension(
            "shardwright.common._reduce",
            ["src/shardwright/common/_reduce.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3"],
        ),
    ]
)
