"""The packages two benchmarks need beyond a plain install: the `bench` extra.

`pip install gangq` (and the image) brings what the controller, the REST API, the demo and the
other commands run on. An HTTP client load generator and a browser driver serve only
`gangq bench api` and `gangq bench ui`, so they stay out of it: those suites import them only
once they run, and check first, before any setup, that they are there, naming the extra to
install instead of dying in an import.
"""

from __future__ import annotations

import importlib.util

from gangq.queue.core.errors import GangqError

EXTRA = "bench"


def require(suite: str, *modules: str) -> None:
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise GangqError(
            f"gangq bench {suite} needs {', '.join(missing)}, which a plain install leaves out: "
            f"install gangq's {EXTRA} extra (pip install 'gangq[{EXTRA}]')"
        )
