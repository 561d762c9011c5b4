"""The loop of every emulated controller (kube-scheduler, kubelets, kube-controller-manager's
taint and device taint eviction): listen to committed events, run one pass per wake-up.

Owns the listener's registration and removal and the wake-up timing; what a pass does is the
controller's. A pass runs at once at start (objects that existed before the controller), then
after every wake-up or when `timeout_s` says a timed action is due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gangq.queue.kubesim.storage import Event, Storage


async def react(
    storage: Storage,
    *,
    on_event: Callable[[Event], None],
    wake: asyncio.Event,
    cycle: Callable[[], None],
    timeout_s: Callable[[], float | None] = lambda: None,
) -> None:
    """Run `cycle` whenever `wake` is set (by `on_event`, called for every committed event) or
    `timeout_s()` seconds have passed (None: only on wake-ups), until cancelled."""
    storage.listeners.append(on_event)
    wake.set()
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s()):
                    await wake.wait()
            wake.clear()
            cycle()
            await asyncio.sleep(0)
    finally:
        storage.listeners.remove(on_event)
