"""One scheduling pass's picture of the cluster and where a pod fits in it.

Owns `View` (per node: the cpu and memory bound pods request, how many pods, which host ports
they hold; the devices every allocation takes) with its trial copies, which let a pod-group
cycle count its members' tentative placements and keep or drop them together, and
`Placement` (a node and the devices a pod's unallocated claims would get there). Pure: it reads
and counts, the scheduler decides and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import allocation, filters


@dataclass(slots=True)
class View:
    """One cycle's picture of the cluster."""

    nodes: list[dict[str, Any]]
    used: dict[str, dict[str, int]]
    counts: dict[str, int]
    ports: dict[str, set[filters.HostPort]]
    devices: allocation.Usage
    """What every allocation takes, including those this cycle made."""
    context: allocation.Context

    def take(self, pod: dict[str, Any], node: str) -> None:
        """Count the pod on the node: its requests, one pod, its host ports."""
        totals = self.used.setdefault(node, {"cpu": 0, "memory": 0})
        for key, value in filters.pod_requests(pod).items():
            totals[key] += value
        self.counts[node] = self.counts.get(node, 0) + 1
        wanted = filters.host_ports(pod)
        if wanted:
            self.ports.setdefault(node, set()).update(wanted)

    def trial(self) -> View:
        """A copy whose placements leave this view alone until `adopt`ed (a pod-group cycle
        counts its own tentative placements)."""
        return View(
            nodes=self.nodes,
            used={node: dict(totals) for node, totals in self.used.items()},
            counts=dict(self.counts),
            ports={node: set(taken) for node, taken in self.ports.items()},
            devices=self.devices.child(),
            context=self.context,
        )

    def adopt(self, trial: View) -> None:
        self.used, self.counts, self.ports = trial.used, trial.counts, trial.ports
        trial.devices.merge()


@dataclass(slots=True)
class Placement:
    """Where a pod fits: the node and the devices its unallocated claims would get there."""

    node: dict[str, Any]
    plan: dict[str, list[dict[str, Any]]]
    devices: allocation.Usage
    """The plan's devices, taken in a child of the view's usage."""

    @property
    def node_name(self) -> str:
        return str(self.node["metadata"]["name"])
