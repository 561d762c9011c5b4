"""Device-level invariants of a demo run, judged from observed ResourceClaims, Pods and Slices.

Owns two checks: no device is in two allocated claims at once (evaluated on every claim event;
shares of a multi-allocatable device are left to `counters.py`) and, by device identity (the
driver's identity attribute, e.g. the GPU UUID), no device serves two running pods at once
(evaluated on every pod and claim event). It is fed API objects as dicts and does no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DeviceName = tuple[str, str, str]
"""driver, pool, device."""


def allocated_devices(claim: Mapping[str, Any]) -> frozenset[DeviceName]:
    """The devices a claim's `status.allocation` holds exclusively (empty when unallocated):
    a share of a multi-allocatable device (a result with a `shareID`) is meant to sit beside
    other claims' shares, and `counters.py` judges those."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return frozenset(
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in results
        if not r.get("shareID")
    )


def pod_claim_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the claims a pod uses, direct or generated from a template."""
    names = [
        str(entry["resourceClaimName"])
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []
        if entry.get("resourceClaimName")
    ]
    names += [
        str(entry["resourceClaimName"])
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if entry.get("resourceClaimName")
    ]
    return tuple(dict.fromkeys(names))


def identities(
    resource_slice: Mapping[str, Any], *, attributes: Mapping[str, str]
) -> dict[DeviceName, str]:
    """Device name -> identity for a slice whose driver publishes an identity attribute."""
    spec = resource_slice.get("spec") or {}
    driver = str(spec.get("driver"))
    attribute = attributes.get(driver)
    if attribute is None:
        return {}
    pool = str((spec.get("pool") or {}).get("name"))
    found: dict[DeviceName, str] = {}
    for device in spec.get("devices") or []:
        value = ((device.get("attributes") or {}).get(attribute) or {}).get("string")
        if value:
            found[(driver, pool, str(device.get("name")))] = str(value)
    return found


@dataclass(frozen=True, slots=True)
class DoubleAllocation:
    device: DeviceName
    claims: tuple[str, str]

    def describe(self) -> str:
        first, second = self.claims
        return f"device {'/'.join(self.device)} allocated to both {first} and {second}"


@dataclass(frozen=True, slots=True)
class IdentityConflict:
    identity: str
    pods: tuple[str, ...]

    def describe(self) -> str:
        return f"device {self.identity} used by running pods {', '.join(self.pods)}"


@dataclass
class DeviceLedger:
    """Allocations and running pods as last observed, with every violation ever seen."""

    identity: dict[DeviceName, str] = field(default_factory=dict)
    allocations: dict[str, frozenset[DeviceName]] = field(default_factory=dict)
    running_pods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Running pod key -> its claim keys."""
    double_allocations: set[DoubleAllocation] = field(default_factory=set)
    identity_conflicts: set[IdentityConflict] = field(default_factory=set)
    checked_identities: set[str] = field(default_factory=set)
    unidentified: set[DeviceName] = field(default_factory=set)

    def add_slice(
        self, resource_slice: Mapping[str, Any], *, attributes: Mapping[str, str]
    ) -> None:
        self.identity.update(identities(resource_slice, attributes=attributes))

    def on_claim(self, key: str, claim: Mapping[str, Any] | None) -> list[str]:
        """Record a claim (None when deleted); returns the violations it creates."""
        devices = frozenset() if claim is None else allocated_devices(claim)
        if devices:
            self.allocations[key] = devices
        else:
            self.allocations.pop(key, None)
        found = {
            DoubleAllocation(device, (min(key, other), max(key, other)))
            for other, held in self.allocations.items()
            if other != key
            for device in devices & held
        }
        new = sorted(found - self.double_allocations, key=lambda d: (d.device, d.claims))
        self.double_allocations.update(new)
        return [d.describe() for d in new] + self._check_running()

    def on_pod(self, key: str, pod: Mapping[str, Any] | None) -> list[str]:
        """Record a pod (None when deleted); returns the identity conflicts it creates."""
        is_running = pod is not None and (pod.get("status") or {}).get("phase") == "Running"
        if is_running and pod is not None:
            namespace = str((pod.get("metadata") or {}).get("namespace"))
            self.running_pods[key] = tuple(f"{namespace}/{n}" for n in pod_claim_names(pod))
        else:
            self.running_pods.pop(key, None)
        return self._check_running()

    def _check_running(self) -> list[str]:
        users: dict[str, set[str]] = defaultdict(set)
        for pod, claims in self.running_pods.items():
            for device in self._devices(claims):
                identity = self.identity.get(device)
                if identity is None:
                    self.unidentified.add(device)
                    identity = "/".join(device)
                self.checked_identities.add(identity)
                users[identity].add(pod)
        found = {
            IdentityConflict(identity, tuple(sorted(pods)))
            for identity, pods in users.items()
            if len(pods) > 1
        }
        new = sorted(found - self.identity_conflicts, key=lambda c: c.identity)
        self.identity_conflicts.update(new)
        return [c.describe() for c in new]

    def _devices(self, claims: Iterable[str]) -> set[DeviceName]:
        return {device for claim in claims for device in self.allocations.get(claim, ())}
