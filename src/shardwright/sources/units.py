"""Lengths in nanometres: the unit names and abbreviations the sources' metadata use.

OME-Zarr names every SI-prefixed metre and a few others (`angstrom`, `foot`, `inch`, `yard`,
`mile`, `parsec`); N5 and ImageJ TIFFs write abbreviations (`nm`, `um`, `µm`, `mm`) or `micron`.
Precomputed output is in nanometres; OME-Zarr output keeps the source's unit where it names one.
"""

from __future__ import annotations

NANOMETER = "nanometer"

_SI_PREFIXES = {
    "yocto": -24, "zepto": -21, "atto": -18, "femto": -15, "pico": -12, "nano": -9,
    "micro": -6, "milli": -3, "centi": -2, "deci": -1, "": 0, "deca": 1, "hecto": 2,
    "kilo": 3, "mega": 6, "giga": 9, "tera": 12, "peta": 15, "exa": 18, "zetta": 21,
    "yotta": 24,
}  # fmt: skip

# OME-Zarr's space units (its axes' `unit`), in nanometres.
OME_LENGTH_UNITS: dict[str, float] = {
    **{f"{prefix}meter": 10.0 ** (exponent + 9) for prefix, exponent in _SI_PREFIXES.items()},
    "angstrom": 0.1,
    "foot": 0.3048e9,
    "inch": 0.0254e9,
    "yard": 0.9144e9,
    "mile": 1609.344e9,
    "parsec": 3.0856775814913673e25,
}

# Every spelling a source's metadata may use: OME's names, then abbreviations and `micron`.
NM_PER_UNIT: dict[str, float] = {
    **OME_LENGTH_UNITS,
    "nm": 1.0,
    "um": 1e3,
    "\u00b5m": 1e3,  # micro sign
    "\u03bcm": 1e3,  # Greek mu
    "micron": 1e3,
    "mm": 1e6,
    "\u00c5": 0.1,  # angstrom sign
}


def nm_per(unit: object) -> float | None:
    """Nanometres in one `unit`, or None for a unit that is no length (or none at all)."""
    return NM_PER_UNIT.get(unit) if isinstance(unit, str) else None
