"""How every gangq process runs its asyncio code: on uvloop, with a collector tuned for watches.

The controller is bound by I/O bookkeeping: about ten API requests and sixteen watch events a
job, each a handful of event-loop callbacks, socket reads and transport writes. uvloop does that
bookkeeping in C (kopf offers the same choice); on the end-to-end bench it took about a fifth
of the controller's CPU per job away together with the collector setting below.

The collector: every watch event decodes into a few dozen dicts and lists that die young (the
cache keeps the newest object and drops the last), so at Python's default threshold of 700 net
allocations the young generation was collected ~40 times a second, and each third-generation
pass walked every cached object: 140 ms each, 15 % of the controller's CPU at saturation. The
decoded objects are acyclic and freed by reference counting anyway; a threshold of 50,000 leaves
the collector for the rare cycles, with at most that many unreachable objects waiting.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

YOUNG_GENERATION_THRESHOLD = 50_000
T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a new uvloop loop (same SIGINT and clean-up behaviour)."""
    tune_collector()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def tune_collector() -> None:
    """Raise the young generation's threshold; the older generations keep their ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
