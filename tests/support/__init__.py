"""The tests' helper modules (volumes, object-store servers, test hosts, ...), imported as
`from tests.support import volumes`; pytest puts the repository root on `sys.path`
(pyproject's `pythonpath`), and the tests hand that path on to the processes they start. Some
are run as programs or loaded by Dask workers by their path under `SUPPORT`."""

from __future__ import annotations

import pathlib

SUPPORT = pathlib.Path(__file__).parent
