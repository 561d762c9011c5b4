"""Fractions of a device (PRODUCT rule 12): shared counters of partitionable devices and capacity
shares of multi-allocatable devices, and the ledger that keeps both from being over-committed.

A whole GPU and its partitions are separate devices that consume the same counter set; a device
is allocatable only while every counter it consumes has room. A multi-allocatable device serves
several claims, each taking a share of its capacity rounded up by the capacity's request
policy; the shares never exceed the capacity. The API server checks neither (reference cases
10-12 and 10-34), so the allocator must. Pure: no I/O, amounts in thousandths.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from gangq.queue.core.device import CounterSetId, Device, DeviceId, qualify
from gangq.queue.core.model import ReplicaPlacement

CapacityRequests = tuple[tuple[str, int], ...]
"""Capacity name (as the job wrote it) -> amount in thousandths, sorted: a job's share request."""
Consumed = tuple[tuple[str, int], ...]
"""Qualified capacity name -> amount in thousandths one share takes of a device."""

WHOLE = 1000
"""A whole device in GPU-equivalents, in thousandths (quotas and usage count in this unit)."""


def consumption(device: Device, requests: CapacityRequests) -> Consumed | None:
    """What one allocation of `device` for these requests takes of its capacity, as DRA computes
    it: a requested amount rounded up by the capacity's policy, an unrequested capacity its
    policy's default, or all of it without a policy. An exclusive device takes nothing but must
    have every requested capacity. None: the device cannot serve the requests."""
    asked = {qualify(name, driver=device.driver): amount for name, amount in requests}
    capacity = device.capacity
    if not device.multi:
        if any(capacity.get(name, -1) < amount for name, amount in asked.items()):
            return None
        return ()
    if any(name not in capacity for name in asked):
        return None
    taken: list[tuple[str, int]] = []
    for name, total in sorted(capacity.items()):
        policy = device.policies.get(name)
        amount: int | None
        if name in asked:
            amount = asked[name] if policy is None else policy.round_up(asked[name])
        else:
            amount = total if policy is None or policy.default is None else policy.default
        if amount is None or amount > total:
            return None
        taken.append((name, amount))
    return tuple(taken)


Equivalent = int | Fraction
"""GPU-equivalents in thousandths: exact, so seven 1/7 partitions are exactly one GPU. A
Fraction only where a partition or share is no whole number of thousandths; whole devices stay
integers and cost no fraction arithmetic."""


def _exact(value: Fraction) -> Equivalent:
    return value.numerator if value.denominator == 1 else value


def equivalent(
    device: Device, consumed: Consumed, counters: Mapping[CounterSetId, Mapping[str, int]]
) -> Equivalent:
    """GPU-equivalents (thousandths) one allocation counts for: a share is its largest fraction
    of the device's capacity, a partition its largest fraction of each counter set it consumes
    (counters of a single unit aside), a plain device one (at most one in any case)."""
    if device.multi:
        fractions = [
            Fraction(WHOLE * amount, device.capacity[name])
            for name, amount in consumed
            if device.capacity.get(name, 0) > 0
        ]
        return _exact(min(Fraction(WHOLE), max(fractions, default=Fraction(WHOLE))))
    if not device.consumes:
        return WHOLE
    total = Fraction(0)
    for set_id, amounts in device.consumes:
        limits = counters.get(set_id, {})
        # a counter of one unit says where a partition sits (NVIDIA's `memory-slice-N`), not
        # how much of the GPU it takes: left out unless the set has no other
        sized = {n: a for n, a in amounts.items() if limits.get(n, 0) > WHOLE} or amounts
        total += max(
            (
                Fraction(WHOLE * amount, limits[name]) if limits.get(name, 0) > 0 else WHOLE
                for name, amount in sized.items()
            ),
            default=Fraction(0),
        )
    return _exact(min(Fraction(WHOLE), total))


def rounded_up(value: Equivalent) -> int:
    """Whole thousandths, never fewer than exact (what reservation rows store)."""
    return math.ceil(value)


def format_equivalent(value: Equivalent) -> str:
    """GPU-equivalents as people read them: `3`, `0.143`, `1` for seven sevenths."""
    if value % WHOLE == 0:
        return str(int(value // WHOLE))
    return f"{float(value) / WHOLE:.3f}".rstrip("0")


def placement_equivalent(
    placement: Iterable[ReplicaPlacement],
    devices: Mapping[DeviceId, Device],
    counters: Mapping[CounterSetId, Mapping[str, int]],
) -> Equivalent:
    """GPU-equivalents (thousandths) a placement holds; an unknown device counts whole."""
    total: Equivalent = 0
    for replica in placement:
        shares = {share.device: share.consumed for share in replica.shares}
        for device_id in replica.devices:
            device = devices.get(device_id)
            total += (
                WHOLE if device is None else equivalent(device, shares.get(device_id, ()), counters)
            )
    return total


class Ledger:
    """Counters left per counter set and capacity used per multi-allocatable device, as one
    cycle allocates. A device's counters are charged once, when it is first allocated (its
    later shares do not consume them again)."""

    __slots__ = ("_allocated", "_left", "_shared", "counters")

    def __init__(self, counters: Mapping[CounterSetId, Mapping[str, int]]) -> None:
        self.counters = counters
        self._left: dict[CounterSetId, dict[str, int]] = {
            set_id: dict(values) for set_id, values in counters.items()
        }
        self._shared: dict[DeviceId, dict[str, int]] = {}
        self._allocated: set[DeviceId] = set()

    def counters_fit(self, device: Device) -> bool:
        """Every counter the device consumes has room (or it already holds them). A counter
        set or counter that no slice declares has no room: the device is never allocatable."""
        if not device.consumes or device.id in self._allocated:
            return True
        for set_id, amounts in device.consumes:
            left = self._left.get(set_id)
            if left is None:
                return False
            for name, amount in amounts.items():
                room = left.get(name)
                if room is None or room < amount:
                    return False
        return True

    def fits(self, device: Device, consumed: Consumed) -> bool:
        """One more allocation of the device taking `consumed` over-commits nothing."""
        if not self.counters_fit(device):
            return False
        if device.multi and consumed:
            used = self._shared.get(device.id, {})
            capacity = device.capacity
            return all(used.get(name, 0) + amount <= capacity[name] for name, amount in consumed)
        return True

    def fits_together(self, chosen: Sequence[tuple[Device, Consumed]]) -> bool:
        """Allocating all of `chosen` at once over-commits nothing (they may share counters)."""
        if len({device.id for device, _ in chosen}) < len(chosen):
            return False
        wanted: dict[CounterSetId, dict[str, int]] = {}
        for device, consumed in chosen:
            if not self.fits(device, consumed):
                return False
            if device.id in self._allocated:
                continue
            for set_id, amounts in device.consumes:
                sums = wanted.setdefault(set_id, {})
                for name, amount in amounts.items():
                    sums[name] = sums.get(name, 0) + amount
        for set_id, sums in wanted.items():
            left = self._left.get(set_id, {})
            if any(left.get(name, -1) < amount for name, amount in sums.items()):
                return False
        return True

    def charge(self, device: Device, consumed: Consumed) -> None:
        """Record one allocation (a held one may over-commit: what others did is a fact)."""
        if device.consumes and device.id not in self._allocated:
            for set_id, amounts in device.consumes:
                left = self._left.setdefault(set_id, {})
                for name, amount in amounts.items():
                    left[name] = left.get(name, 0) - amount
        self._allocated.add(device.id)
        if device.multi and consumed:
            used = self._shared.setdefault(device.id, {})
            for name, amount in consumed:
                used[name] = used.get(name, 0) + amount

    def is_broken(self, device: Device) -> bool:
        """Already partitioned or shared: small work goes here before a whole GPU is broken."""
        if device.multi and device.id in self._shared:
            return True
        return any(
            self._left.get(set_id) != self.counters.get(set_id) for set_id, _ in device.consumes
        )


def siblings(
    devices: Iterable[Device], consumers: Mapping[CounterSetId, Sequence[Device]]
) -> set[DeviceId]:
    """The devices sharing a counter set with any of `devices` (themselves included)."""
    found: set[DeviceId] = set()
    for device in devices:
        found.add(device.id)
        for set_id, _ in device.consumes:
            found.update(other.id for other in consumers.get(set_id, ()))
    return found
