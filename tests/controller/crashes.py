"""Killing a controller right after one of its cluster writes, for the crash tests of
admissions, preemptions, grows and shrinks: each runs the same lifecycle again and again, the
controller killed after the first write, then the second, and so on, until a run has fewer."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from gangq.queue.kube import resources
from gangq.queue.kubesim.storage import Event
from tests.controller.conftest import Harness

WATCHED = {
    "/pods",
    "resource.k8s.io/resourceclaims",
    "/services",
    "gangq.dev/trainingjobs",
    "scheduling.k8s.io/podgroups",
}
"""The kinds whose writes count: what a gang's lifecycle writes."""


def double_allocations(harness: Harness) -> list[str]:
    """Devices named by two allocated claims at once (the cluster side of rule 1)."""
    seen: Counter[str] = Counter()
    for claim in harness.objects(resources.RESOURCE_CLAIMS):
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            seen[f"{result['driver']}/{result['pool']}/{result['device']}"] += 1
    return [device for device, count in seen.items() if count > 1]


@dataclass
class KillAfterWrite:
    """An emulator storage listener: cancels the controller run `holder` right after the
    `index`-th write to a watched kind (in `namespace`, when one is given), and at every
    write notes any device allocated twice. Writes stop counting once `over` is set."""

    harness: Harness
    index: int
    holder: str
    namespace: str | None = None
    doubles: list[str] = field(default_factory=list)
    seen: int = 0
    fired: asyncio.Event = field(default_factory=asyncio.Event)
    over: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, event: Event) -> None:
        self.doubles.extend(double_allocations(self.harness))
        if event.resource not in WATCHED or self.fired.is_set() or self.over.is_set():
            return
        if (
            self.namespace is not None
            and (event.object.get("metadata") or {}).get("namespace") != self.namespace
        ):
            return
        self.seen += 1
        if self.seen == self.index:
            self.fired.set()
            self.harness.runs[self.holder][0].cancel()
