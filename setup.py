"""Build the optional C extensions; everything else is declared in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds; compressed_segmentation
falls back to the reference library and pyramid reductions to NumPy (same bytes, slower).
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
            "shardwright.common._reduce",
            ["src/shardwright/common/_reduce.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3"],
        ),
    ]
)
