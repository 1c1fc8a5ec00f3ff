"""The array types shared by the CPU and GPU paths.

Code that runs on either engine is written once over an array namespace `xp` (NumPy or CuPy).
CuPy is imported only on GPU workers, so its types cannot appear in annotations: `Array` names
"a numpy.ndarray or a cupy.ndarray" and `Namespace` the module (`numpy` or `cupy`) that made it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

Array: TypeAlias = Any
"""A numpy.ndarray or a cupy.ndarray."""

Namespace: TypeAlias = Any
"""The `numpy` or `cupy` module."""
