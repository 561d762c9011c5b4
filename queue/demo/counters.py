"""Split GPUs in a demo run, judged from ResourceSlices and allocated ResourceClaims.

Owns two figures that must come from the Kubernetes objects, not from gangq's books: which
claims hold a fraction of a GPU (a partition, i.e. a device consuming less than all of some
counter of its counter set, or a share of a multi-allocatable device, i.e. a result with a
`shareID`), and every over-commit ever seen: a counter set whose allocated devices consume more
than its slice declares, or a multi-allocatable device whose shares consume more than its
`capacity`. The API server checks neither (reference cases 10-12, 10-34). It also knows how
many GPUs each node publishes: a counter set (a GPU published whole and as partitions) is one,
a device consuming no counters is one. Fed API objects as dicts; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.core import quantity
from gangq.queue.demo.devices import DeviceName

SetName = tuple[str, str, str]
"""driver, pool, counter set."""
Amounts = dict[str, int]
"""Counter or capacity name -> amount in thousandths (`quantity.parse_milli`)."""


@dataclass(frozen=True, slots=True)
class Result:
    """One allocation result: the device, and what a share of it consumes."""

    device: DeviceName
    share: bool
    consumed: tuple[tuple[str, int], ...] = ()


def _amounts(values: Mapping[str, Any] | None) -> Amounts:
    return {
        str(name): quantity.parse_milli(str((value or {}).get("value", "0")))
        for name, value in (values or {}).items()
    }


def results(claim: Mapping[str, Any]) -> tuple[Result, ...]:
    """Every result of a claim's `status.allocation`, shares included (empty when unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = []
    for entry in (allocation.get("devices") or {}).get("results") or []:
        consumed = {
            str(name): quantity.parse_milli(str(value))
            for name, value in (entry.get("consumedCapacity") or {}).items()
        }
        device = (str(entry.get("driver")), str(entry.get("pool")), str(entry.get("device")))
        share = bool(entry.get("shareID")) or bool(consumed)
        found.append(Result(device, share, tuple(sorted(consumed.items()))))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class OverCommit:
    what: str
    """`counter set driver/pool/set` or `device driver/pool/device`."""
    detail: str

    def describe(self) -> str:
        return f"{self.what} over-committed: {self.detail}"


@dataclass
class CounterLedger:
    """What the slices publish, the claims' results as last observed, and every over-commit."""

    counter_sets: dict[SetName, Amounts] = field(default_factory=dict)
    consumes: dict[DeviceName, dict[SetName, Amounts]] = field(default_factory=dict)
    capacities: dict[DeviceName, Amounts] = field(default_factory=dict)
    """Multi-allocatable devices only: what their shares may consume together."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Pool -> the node its slices name."""
    plain: set[DeviceName] = field(default_factory=set)
    """Devices consuming no counters (each one GPU)."""
    allocations: dict[str, tuple[Result, ...]] = field(default_factory=dict)
    overcommits: dict[str, OverCommit] = field(default_factory=dict)
    """What -> the first over-commit seen of it."""

    def add_slice(self, resource_slice: Mapping[str, Any]) -> None:
        spec = resource_slice.get("spec") or {}
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        if spec.get("nodeName"):
            self.nodes[pool] = str(spec["nodeName"])
        for counter_set in spec.get("sharedCounters") or []:
            name = (driver, pool, str(counter_set.get("name")))
            self.counter_sets[name] = _amounts(counter_set.get("counters"))
        for device in spec.get("devices") or []:
            key = (driver, pool, str(device.get("name")))
            consumes = {
                (driver, pool, str(entry.get("counterSet"))): _amounts(entry.get("counters"))
                for entry in device.get("consumesCounters") or []
            }
            if consumes:
                self.consumes[key] = consumes
            else:
                self.plain.add(key)
            if device.get("allowMultipleAllocations"):
                self.capacities[key] = _amounts(device.get("capacity"))

    def gpus_by_node(self) -> dict[str, int]:
        """Node -> GPUs its slices publish, a GPU published whole and as partitions once."""
        counted: dict[str, int] = defaultdict(int)
        for _, pool, _ in (*self.counter_sets, *self.plain):
            counted[self.nodes.get(pool, pool)] += 1
        return dict(counted)

    def is_fraction(self, claim: str) -> bool:
        """True when the claim holds a share or a partition (less than all of some counter)."""
        return any(
            result.share or self._is_partition(result.device)
            for result in self.allocations.get(claim, ())
        )

    def _is_partition(self, device: DeviceName) -> bool:
        return any(
            amount < self.counter_sets.get(name, {}).get(counter, 0)
            for name, counters in self.consumes.get(device, {}).items()
            for counter, amount in counters.items()
        )

    def on_claim(self, key: str, claim: Mapping[str, Any] | None) -> list[str]:
        """Record a claim (None when deleted); returns the over-commits it creates."""
        held = () if claim is None else results(claim)
        if held:
            self.allocations[key] = held
        else:
            self.allocations.pop(key, None)
        new = [
            found
            for found in (*self._counter_overcommits(), *self._capacity_overcommits())
            if found.what not in self.overcommits
        ]
        self.overcommits.update((found.what, found) for found in new)
        return [found.describe() for found in new]

    def _counter_overcommits(self) -> list[OverCommit]:
        """A device's counters count once, however many claims share it."""
        devices = {result.device for held in self.allocations.values() for result in held}
        used: dict[SetName, Amounts] = defaultdict(lambda: defaultdict(int))
        for device in devices:
            for name, counters in self.consumes.get(device, {}).items():
                for counter, amount in counters.items():
                    used[name][counter] += amount
        return [
            OverCommit(f"counter set {'/'.join(name)}", _excess(amounts, self.counter_sets[name]))
            for name, amounts in used.items()
            if name in self.counter_sets and _excess(amounts, self.counter_sets[name])
        ]

    def _capacity_overcommits(self) -> list[OverCommit]:
        used: dict[DeviceName, Amounts] = defaultdict(lambda: defaultdict(int))
        for held in self.allocations.values():
            for result in held:
                if result.share:
                    for name, amount in result.consumed:
                        used[result.device][name] += amount
        return [
            OverCommit(f"device {'/'.join(device)}", _excess(amounts, self.capacities[device]))
            for device, amounts in used.items()
            if device in self.capacities and _excess(amounts, self.capacities[device])
        ]


def _excess(used: Mapping[str, int], available: Mapping[str, int]) -> str:
    """`memory 90Gi of 80Gi, ...` for every name used beyond what is available ('' if none)."""
    return ", ".join(
        f"{name} {quantity.format_milli(amount)} of {quantity.format_milli(available.get(name, 0))}"
        for name, amount in sorted(used.items())
        if amount > available.get(name, 0)
    )
