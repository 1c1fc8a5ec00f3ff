"""The package's version, recorded in every manifest, job record and lease this project writes
(its own module, so the records need not import the package's API to name it)."""

__version__ = "0.1.0"
