"""Build the optional C encoder; everything else is declared in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and compressed_segmentation
falls back to the reference library (same bytes, but encoding holds the GIL).
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
        )
    ]
)
