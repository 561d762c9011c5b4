"""The per-cycle pool of free devices and node room, indexed for fast placement.

Owns the mutable state one cycle works on: which devices are free, how much CPU, memory and pod
room each node has left for gangq pods, and per selector (device class + job selectors) the free
matching devices of each node bucketed by count, so a job never scans every device. Built each
cycle from what the running gangs leave free (module `occupancy`); it decides nothing, it only
answers and records.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

from gangq.queue.core import derived, fit, occupancy, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import CounterSetId, Device, DeviceId
from gangq.queue.core.model import (
    Inventory,
    NodeName,
    PendingJob,
    PodRequirements,
    ReplicaPlacement,
    RunningJob,
    Share,
)

SelectorKey = tuple[str, tuple[str, ...], sharing.CapacityRequests]
"""(device class name, job selectors, capacity requests): the unit of matching that views are
cached by."""
Held = tuple[NodeName, tuple[Device, ...]]
"""One replica of a running gang: its node and its devices that match a selector key."""


Chooser = Callable[[Sequence[Device], int], Sequence[Device] | None]
"""Picks `count` devices of a group that may be allocated together (`Pool.chooser`)."""


def first_devices(devices: Sequence[Device], count: int) -> Sequence[Device] | None:
    """The first `count` devices: any plain devices may go together."""
    return devices[:count] if len(devices) >= count else None


PREFERENCE_WINDOW = 16
"""Nodes of one bucket ranked by how used their domain is; ranking a whole bucket of a big,
empty cluster for every job would cost more than the fragmentation it saves."""


class FreeView:
    """Free devices that match one selector key, per node, with nodes bucketed by free count
    and free devices counted per topology domain."""

    __slots__ = ("buckets", "by_node", "domain_free", "domain_of", "total")

    def __init__(
        self, by_node: dict[NodeName, Sequence[Device]], *, domain_of: dict[NodeName, str]
    ) -> None:
        self.by_node = by_node
        self.domain_of = domain_of
        size = max((len(devices) for devices in by_node.values()), default=0) + 1
        self.buckets: list[dict[NodeName, None]] = [{} for _ in range(size)]
        self.domain_free: dict[str, int] = {}
        self.total = 0
        """Free matching devices in all: borrowers compare it with what others are owed."""
        for node, devices in by_node.items():
            self.total += len(devices)
            self.buckets[len(devices)][node] = None
            domain = domain_of.get(node, "")
            self.domain_free[domain] = self.domain_free.get(domain, 0) + len(devices)

    def nodes_with_at_least(self, count: int) -> Iterator[NodeName]:
        """Nodes with `count` or more free matching devices: fewest first (best fit). In the
        bucket of the emptiest nodes the first few go by most used domain, so whole domains
        stay free for big gangs."""
        last = len(self.buckets) - 1
        for size in range(max(count, 1), last + 1):
            bucket = self.buckets[size]
            if size < last or len(bucket) <= 1:
                yield from bucket
                continue
            domain_free, domain_of = self.domain_free, self.domain_of
            head = list(itertools.islice(bucket, PREFERENCE_WINDOW))
            head.sort(key=lambda node: (domain_free.get(domain_of.get(node, ""), 0), node))
            yield from head
            yield from itertools.islice(bucket, PREFERENCE_WINDOW, None)

    def remove(self, node: NodeName, taken: set[int]) -> None:
        """Drop the devices whose `id()` is in `taken` (identity: cheaper than DeviceId)."""
        devices = self.by_node.get(node)
        if devices is None:
            return
        kept = [device for device in devices if id(device) not in taken]
        if len(kept) == len(devices):
            return
        del self.buckets[len(devices)][node]
        domain = self.domain_of.get(node, "")
        gone = len(devices) - len(kept)
        self.domain_free[domain] -= gone
        self.total -= gone
        if kept:
            self.by_node[node] = kept
            self.buckets[len(kept)][node] = None
        else:
            del self.by_node[node]


_matching_free: derived.PerInventory[
    dict[
        tuple[tuple[str, ...] | None, sharing.CapacityRequests],
        dict[NodeName, tuple[Sequence[Device], tuple[Device, ...]]],
    ]
] = derived.PerInventory(lambda inventory: {})
"""Per selector expressions and capacity requests, and per node: the node's free devices as
last seen and those of them that match and can give that capacity (plain devices only). A
node's free devices are the same sequence from cycle to cycle until a gang there starts or
ends (module `occupancy`), so a view matches only the devices of nodes that changed, not every
device of the cluster at every cycle (filled as views ask; see `derived`)."""


class Pool:
    """Free devices and node room of one cycle; `take` records what an admission uses."""

    def __init__(
        self,
        *,
        inventory: Inventory,
        running: Sequence[RunningJob],
        matcher: DeviceMatcher,
        domain_key: str | None = None,
    ) -> None:
        """`domain_key` is the node label whose domains best fit fills first (none: nodes
        only)."""
        self.inventory = inventory
        self.matcher = matcher
        base = occupancy.candidates(inventory)
        start = occupancy.count(inventory, base, running)
        self._base = base
        self.free_by_node: dict[NodeName, Sequence[Device]] = start.free_by_node()
        """Each node's free devices: the same sequence from cycle to cycle while no gang there
        starts or ends (module `occupancy`; a view reuses what it found in it, see
        `_matching_free`), a new one once this cycle takes some; never changed in place."""
        self.free: set[DeviceId] = set(start.free)
        self._free_ids: dict[int, DeviceId] = dict(start.free_ids)
        """`id()` of each free device -> its DeviceId, to skip rebuilding the id string."""
        self.ledger = sharing.Ledger(inventory.counters)
        """Counters and capacity shares left (rule 12); untouched where every device is plain."""
        self.partitioned = base.partitioned
        """Some device consumes counters or is shared (or others hold shares): `take` must
        re-check the neighbours of what it takes."""
        gone = start.gone
        self._consumers: dict[CounterSetId, list[Device]] = {
            set_id: [d for d in devices if id(d) not in gone]
            for set_id, devices in base.consumers.items()
        }
        """Free devices per counter set they consume."""
        self.headroom: dict[NodeName, occupancy.Room] = dict(start.headroom)
        """CPU, memory and pods left per node; a node's entry is replaced, never changed."""
        self._accepted: dict[PodRequirements, dict[NodeName, bool]] = {}
        self._views: dict[SelectorKey, FreeView] = {}
        self.domain_of: dict[NodeName, str] = {
            name: node.labels.get(domain_key, "") if domain_key else ""
            for name, node in inventory.nodes.items()
        }
        self._expressions: dict[SelectorKey, tuple[str, ...] | None] = {}
        self._capable: dict[tuple[SelectorKey, int], frozenset[NodeName]] = {}
        self._matching_per_node: dict[SelectorKey, dict[NodeName, int]] = {}
        self._answers: dict[SelectorKey, dict[DeviceId, bool]] = {}
        self._held: dict[tuple[SelectorKey, str, int, int], tuple[Held, ...]] = {}
        self._estimates: dict[SelectorKey, sharing.Equivalent] = {}
        self._holders: dict[CounterSetId, set[str]] = {}
        """Who uses each counter set: gangs by key, `""` for claims gangq did not make and
        admissions of this cycle."""
        if self.partitioned:
            self._charge_held(running)

    def _charge_held(self, running: Sequence[RunningJob]) -> None:
        """Charge the counters and shares that gangs and others hold, then drop the free
        devices whose counters have no room left."""
        devices, ledger = self.inventory.devices, self.ledger
        for job in running:
            for replica in job.placement:
                parts = {share.device: share.consumed for share in replica.shares}
                for device_id in replica.devices:
                    if device_id in devices:
                        ledger.charge(devices[device_id], parts.get(device_id, ()))
                        self._hold(devices[device_id], job.key)
        for device_id in self.inventory.held_by_others:
            if device_id in devices:
                ledger.charge(devices[device_id], ())
                self._hold(devices[device_id], "")
        whole: set[DeviceId] = set()
        for device_id, consumed in self.inventory.shared_by_others.items():
            if device_id in devices:
                ledger.charge(devices[device_id], consumed)
                self._hold(devices[device_id], "")
                if not devices[device_id].multi:
                    whole.add(device_id)
        blocked = [
            device
            for devices_of_node in self.free_by_node.values()
            for device in devices_of_node
            if device.id in whole or not ledger.counters_fit(device)
        ]
        self._drop(blocked)

    def _hold(self, device: Device, holder: str) -> None:
        for set_id, _ in device.consumes:
            self._holders.setdefault(set_id, set()).add(holder)

    def _drop(self, devices: Iterable[Device]) -> None:
        """No longer free for anyone (taken whole, or its counters have no room)."""
        by_node: dict[NodeName, set[int]] = {}
        for device in devices:
            if device.node is not None:
                by_node.setdefault(NodeName(device.node), set()).add(id(device))
                self.free.discard(device.id)
        for node, gone in by_node.items():
            current = self.free_by_node.get(node, [])
            kept = [device for device in current if id(device) not in gone]
            if kept:
                self.free_by_node[node] = kept
            else:
                self.free_by_node.pop(node, None)
            for view in self._views.values():
                view.remove(node, gone)

    def admits(self, key: SelectorKey, device: Device) -> bool:
        """One more allocation of the device for `key`'s capacity requests over-commits no
        counter and no capacity (always true for a plain device and no requests)."""
        requests = key[2]
        if device.is_plain and not requests:
            return True
        consumed = sharing.consumption(device, requests)
        return consumed is not None and self.ledger.fits(device, consumed)

    def chooser(self, key: SelectorKey) -> Chooser:
        """How `count` devices of one replica are picked from a node's free matching devices:
        the first ones, or where devices share counters, a set that fits together, taking
        devices of GPUs already partitioned or shared first (whole GPUs stay whole)."""
        if not self.partitioned:
            return first_devices
        requests, ledger = key[2], self.ledger

        def choose(devices: Sequence[Device], count: int) -> Sequence[Device] | None:
            if len(devices) < count:
                return None
            if all(device.is_plain for device in devices):
                return devices[:count]
            ordered = sorted(devices, key=lambda d: not ledger.is_broken(d))
            picked: list[tuple[Device, sharing.Consumed]] = []
            for device in ordered:
                consumed = sharing.consumption(device, requests)
                if consumed is None:
                    continue
                if ledger.fits_together([*picked, (device, consumed)]):
                    picked.append((device, consumed))
                    if len(picked) == count:
                        return [device for device, _ in picked]
            return None

        return choose

    def shares_of(self, key: SelectorKey, devices: Iterable[Device]) -> tuple[Share, ...]:
        """The shares a replica takes of the multi-allocatable ones among its devices."""
        found = []
        for device in devices:
            if device.multi:
                consumed = sharing.consumption(device, key[2])
                if consumed is not None:
                    found.append(Share(device.id, consumed))
        return tuple(found)

    def held_equivalent(self, placement: Iterable[ReplicaPlacement]) -> sharing.Equivalent:
        """GPU-equivalents (thousandths) a placement holds: partitions and shares in part."""
        return sharing.placement_equivalent(
            placement, self.inventory.devices, self.inventory.counters
        )

    def weigher(self) -> Callable[[RunningJob], sharing.Equivalent] | None:
        """What a gang counts for in quotas (`QuotaBook`); None: every device is whole."""
        if not self.partitioned:
            return None
        return lambda job: self.held_equivalent(job.placement)

    def weighed(self, job: PendingJob) -> PendingJob:
        """The job with what each of its devices may count for in quotas: the most any matching
        partition or share counts for, so a quota check before placement never under-counts."""
        share = self.share_estimate((job.device_class, job.selectors, job.capacity_requests))
        return job if share == job.share_milli else dataclasses.replace(job, share_milli=share)

    def share_estimate(self, key: SelectorKey) -> sharing.Equivalent:
        """The most GPU-equivalents (thousandths) one device matching `key` may count for;
        a whole one when nothing matches."""
        found = self._estimates.get(key)
        if found is None:
            counters, requests = self.inventory.counters, key[2]
            found = max(
                (
                    sharing.equivalent(device, consumed, counters)
                    for device in self.inventory.devices.values()
                    if (consumed := sharing.consumption(device, requests)) is not None
                    and self.is_matching(key, device)
                ),
                default=sharing.WHOLE,
            )
            self._estimates[key] = found
        return found

    def siblings(self, devices: Iterable[DeviceId]) -> frozenset[DeviceId]:
        """These devices and every free one sharing a counter set with them: kept for a
        reservation, none of them may go to another job."""
        devices = list(devices)
        known = self.inventory.devices
        found = sharing.siblings((known[d] for d in devices if d in known), self._consumers)
        return frozenset(found) | frozenset(devices)

    def _charge(self, node: NodeName, pod: PodRequirements, *, sign: int) -> None:
        room = self.headroom.get(node)
        if room is not None:
            self.headroom[node] = (
                room[0] - sign * pod.cpu_milli,
                room[1] - sign * pod.memory_bytes,
                room[2] - sign,
            )

    def is_matching(self, key: SelectorKey, device: Device) -> bool:
        """Device class selectors and job selectors all accept the device."""
        return self._matching_of(key)(device, device.id)

    def _matching_of(self, key: SelectorKey) -> Callable[[Device, DeviceId], bool]:
        """The test of one selector key, with one answer per device per cycle, looked up by id:
        cheaper than asking the matcher again, which must check that the device did not
        change. Resolved once per key, so a loop over many devices hashes no key tuples."""
        answers = self._answers.get(key)
        if answers is None:
            answers = self._answers[key] = {}
        expressions = self._expressions_of(key)
        matches_all = self.matcher.matches_all

        def is_matching(device: Device, device_id: DeviceId) -> bool:
            answer = answers.get(device_id)
            if answer is None:
                answer = answers[device_id] = expressions is not None and matches_all(
                    expressions, device, device_id=device_id
                )
            return answer

        return is_matching

    def _expressions_of(self, key: SelectorKey) -> tuple[str, ...] | None:
        """Device class selectors, then job selectors; None when the class does not exist."""
        if key not in self._expressions:
            device_class = self.inventory.device_classes.get(key[0])
            self._expressions[key] = (
                (*device_class.selectors, *key[1]) if device_class is not None else None
            )
        return self._expressions[key]

    def held_matching(self, key: SelectorKey, job: RunningJob) -> tuple[Held, ...]:
        """Per replica node of a gang, its devices that match `key` (cached for the cycle). A
        part of a gang (a shrink's, `elastic.split`) holds a run of its replicas: the first
        replica and the count tell the parts apart."""
        first = job.placement[0].replica if job.placement else -1
        cache_key = (key, job.key, first, len(job.placement))
        held = self._held.get(cache_key)
        if held is None:
            devices, is_matching = self.inventory.devices, self._matching_of(key)
            held = tuple(
                (
                    replica.node,
                    tuple(
                        devices[d]
                        for d in replica.devices
                        if d in devices and is_matching(devices[d], d)
                    ),
                )
                for replica in job.placement
                if replica.node in self.headroom
            )
            if self.partitioned:
                held = self._with_unblocked(key, job, held)
            self._held[cache_key] = held
        return held

    def _with_unblocked(
        self, key: SelectorKey, job: RunningJob, held: tuple[Held, ...]
    ) -> tuple[Held, ...]:
        """Add to a gang's matching devices those only its partitions keep from being free:
        devices whose every counter set the gang alone uses (nobody else, no admission of this
        cycle). Its end frees them for sure; where several hold a GPU, none is credited."""
        devices, is_matching, holders = (
            self.inventory.devices,
            self._matching_of(key),
            self._holders,
        )
        mine = {job.key}
        extra: dict[NodeName, list[Device]] = {}
        seen: set[DeviceId] = set()
        for replica in job.placement:
            for device_id in replica.devices:
                device = devices.get(device_id)
                if device is None:
                    continue
                for set_id, _ in device.consumes:
                    if holders.get(set_id) != mine:
                        continue
                    for other in self._consumers.get(set_id, ()):
                        if (
                            other.id in seen
                            or other.id in self.free
                            or other.multi
                            or other.node is None
                            or any(holders.get(s, mine) != mine for s, _ in other.consumes)
                            or not is_matching(other, other.id)
                        ):
                            continue
                        seen.add(other.id)
                        extra.setdefault(NodeName(other.node), []).append(other)
        if not extra:
            return held
        return tuple((node, (*matching, *extra.pop(node, ()))) for node, matching in held) + tuple(
            (node, tuple(more)) for node, more in extra.items() if node in self.headroom
        )

    def matching_count(self, key: SelectorKey, node: NodeName) -> int:
        """Untainted devices on the node that match `key`, free or not."""
        self.capable_nodes(key, 1)
        return self._matching_per_node[key].get(node, 0)

    def capable_nodes(self, key: SelectorKey, count: int) -> frozenset[NodeName]:
        """Nodes with at least `count` matching untainted devices, free or not: the only nodes
        a job could ever use, however many gangs left."""
        cache_key = (key, count)
        found = self._capable.get(cache_key)
        if found is None:
            per_node = self._matching_per_node.get(key)
            if per_node is None:
                # counted once per inventory by the matcher, not once per cycle: a scan of
                # every device costs more than a whole cycle's placements
                expressions = self._expressions_of(key)
                counts = (
                    {}
                    if expressions is None
                    else self.matcher.count_by_node(expressions, self.inventory.devices)
                )
                per_node = self._matching_per_node[key] = {
                    NodeName(node): count for node, count in counts.items()
                }
            found = frozenset(n for n, c in per_node.items() if c >= count)
            self._capable[cache_key] = found
        return found

    def view(self, key: SelectorKey) -> FreeView:
        view = self._views.get(key)
        if view is None:
            by_node: dict[NodeName, Sequence[Device]] = {}
            expressions = self._expressions_of(key)
            accepted = (
                frozenset()
                if expressions is None
                else self.matcher.member_ids(expressions, self.inventory.devices)
            )
            ids, admits = self._free_ids, self.admits
            if self.partitioned:
                for node, devices in self.free_by_node.items():
                    matching = [d for d in devices if ids[id(d)] in accepted and admits(key, d)]
                    if matching:
                        by_node[node] = matching
            else:
                # plain devices: whether one can give the requested capacity never changes
                requests, every = key[2], self._base.ids
                memo = _matching_free(self.inventory)
                known = memo.get((expressions, requests))
                if known is None:
                    known = memo[(expressions, requests)] = {}
                for node, devices in self.free_by_node.items():
                    found = known.get(node)
                    if found is None or found[0] is not devices:
                        found = known[node] = (
                            devices,
                            tuple(
                                d
                                for d in devices
                                if every[id(d)] in accepted and (not requests or admits(key, d))
                            ),
                        )
                    if found[1]:
                        by_node[node] = found[1]
            view = FreeView(by_node, domain_of=self.domain_of)
            self._views[key] = view
        return view

    def free_count(self, device_class: str) -> int:
        """Free devices the device class matches, whatever the job selectors."""
        return self.view((device_class, (), ())).total

    def is_accepted(self, node: NodeName, pod: PodRequirements) -> bool:
        """Labels, taints and state allow the pod on the node (cached: static in a cycle)."""
        answers = self._accepted.get(pod)
        if answers is None:
            answers = self._accepted[pod] = {}
        accepted = answers.get(node)
        if accepted is None:
            accepted = answers[node] = fit.is_accepted(self.inventory.nodes[node], pod)
        return accepted

    def has_room(self, node: NodeName, pod: PodRequirements, *, extra: Sequence[int] = ()) -> bool:
        """CPU, memory and pod count left on the node (plus `extra` freed in a what-if)."""
        room = self.headroom[node]
        cpu, memory, pods = (
            (room[0] + extra[0], room[1] + extra[1], room[2] + extra[2]) if extra else room
        )
        return cpu >= pod.cpu_milli and memory >= pod.memory_bytes and pods >= 1

    def take(
        self,
        node: NodeName,
        devices: Iterable[DeviceId],
        pod: PodRequirements,
        *,
        shares: Sequence[Share] = (),
    ) -> None:
        """Record that one replica uses these devices and this room from now on in the cycle."""
        if self.partitioned:
            self._take_parts(list(devices), shares)
            self._charge(node, pod, sign=1)
            return
        taken_ids = set(devices)
        self.free -= taken_ids
        known = self.inventory.devices
        taken = {id(known[device]) for device in taken_ids if device in known}
        current = self.free_by_node.get(node, [])
        kept = [device for device in current if id(device) not in taken]
        if kept:
            self.free_by_node[node] = kept
        else:
            self.free_by_node.pop(node, None)
        for view in self._views.values():
            view.remove(node, taken)
        self._charge(node, pod, sign=1)

    def _take_parts(self, devices: Sequence[DeviceId], shares: Sequence[Share]) -> None:
        """Charge the ledger, then drop what no longer fits: exclusive devices taken, devices
        whose counters ran out, and per view the shared devices too full for its requests."""
        known, ledger = self.inventory.devices, self.ledger
        consumed = {share.device: share.consumed for share in shares}
        gone: list[Device] = []
        affected: dict[DeviceId, Device] = {}
        for device_id in devices:
            device = known.get(device_id)
            if device is None:
                continue
            ledger.charge(device, consumed.get(device_id, ()))
            self._hold(device, "")
            if device.multi:
                affected[device_id] = device
            else:
                gone.append(device)
            for set_id, _ in device.consumes:
                for other in self._consumers.get(set_id, ()):
                    affected[other.id] = other
        gone.extend(d for d in affected.values() if not ledger.counters_fit(d))
        self._drop(gone)
        self._held.clear()
        for key, view in self._views.items():
            by_node: dict[NodeName, set[int]] = {}
            for device in affected.values():
                if (
                    device.node is not None
                    and device.id in self.free
                    and not self.admits(key, device)
                ):
                    by_node.setdefault(NodeName(device.node), set()).add(id(device))
            for node, unfit in by_node.items():
                view.remove(node, unfit)
