"""The policy interface the simulator drives, the gangq policy, and the list of policies by name.

A policy reads a core `Snapshot` and returns a core `CycleResult`; the simulator applies it. The
`gangq` policy is the real `run_cycle` with the product's tiers, nothing re-implemented here;
the baselines live in `fifo` and `device_plugin`. No policy keeps state the snapshot lacks,
except caches (the CEL matcher).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from gangq.queue.core import cycle, planner
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import CycleResult, Policy, Snapshot
from gangq.queue.sim import device_plugin, fifo

POLICY_NAMES: tuple[str, ...] = ("gangq", "fifo-strict", "fifo-besteffort", "device-plugin")


class SimPolicy(Protocol):
    """What the simulator needs from a policy.

    A job that holds devices for some replicas and waits for the others appears both in
    `snapshot.running` (the replicas placed) and in `snapshot.pending` (the whole job); only
    the device-plugin world produces such jobs. Admissions name replica indexes of the job.
    """

    name: str
    serving_tiers: frozenset[str]
    """Tiers whose admissions the policy forecasts serving scale-ups from (empty: none)."""
    whole_gangs: bool
    """True: the first admission of a job that holds nothing is its whole gang, of the size
    the policy chose (an elastic job's may be below its replicas); False: replicas are
    placed one by one, and a job runs once all its replicas are."""

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult: ...

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        """A later instant at which a cycle could decide differently with no event in between."""
        ...


class GangqPolicy:
    """The decision core as the controller runs it: quotas, tiers, backfill, preemption."""

    name = "gangq"
    whole_gangs = True

    def __init__(self, *, device_class: str, policy: Policy | None = None) -> None:
        """`policy` carries tiers and knobs (from a settings file); default: the product's."""
        base = policy if policy is not None else Policy()
        self.policy = dataclasses.replace(base, managed_device_classes=(device_class,))
        self.serving_tiers = frozenset(
            tier.name for tier in self.policy.tiers if tier.always_preempts
        )
        self.matcher = DeviceMatcher()
        self._tiers = {tier.name: tier for tier in self.policy.tiers}

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult:
        return cycle.run_cycle(snapshot=snapshot, policy=self.policy, now=now, matcher=self.matcher)

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        """When a tier's protection or preemption delay ends (when a reclaim will pay, the
        cycle says itself: `CycleResult.decide_again_at`)."""
        return planner.protection_ends(snapshot, tiers=self._tiers, now=now)


def create(name: str, *, device_class: str, settings: Policy | None = None) -> SimPolicy:
    """A fresh policy by its command-line name; `settings` configure gangq's."""
    if name == "gangq":
        return GangqPolicy(device_class=device_class, policy=settings)
    if name == "fifo-strict":
        return fifo.FifoPolicy(strict=True)
    if name == "fifo-besteffort":
        return fifo.FifoPolicy(strict=False)
    if name == "device-plugin":
        return device_plugin.DevicePluginPolicy()
    raise InvalidInputError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")


def parse_names(text: str) -> tuple[str, ...]:
    """`gangq,fifo-besteffort` or `all` into policy names, in the order given, without repeats."""
    if text.strip() == "all":
        return POLICY_NAMES
    names: list[str] = []
    for part in text.split(","):
        name = part.strip()
        if name not in POLICY_NAMES:
            raise InvalidInputError(
                f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)} or all"
            )
        if name not in names:
            names.append(name)
    return tuple(names)
