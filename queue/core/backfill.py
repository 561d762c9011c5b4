"""EASY-style backfill reservations (rule 5): the first blocked job of each tier is given its
earliest start, on concrete nodes, from the predicted ends of the gangs holding devices (EASY++:
history instead of `maxRuntimeSeconds`, which stays the bound a gang never runs past).

Owns that search and the `Hold` that keeps later-ordered jobs off what the reservation needs
(unless they end before it starts). It never admits anything; the cycle asks it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gangq.queue.core import placement, prediction
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.model import (
    BackfillReservation,
    JobKey,
    NodeName,
    PodRequirements,
    RunningJob,
    Tier,
    TopologyMode,
)
from gangq.queue.core.pool import Pool

Room = tuple[int, int, int]
"""CPU (thousandths), memory (bytes) and pod count on one node."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation in force for the rest of the cycle: the devices free now that its job will
    use, and the pod room it needs on its nodes."""

    reservation: BackfillReservation
    devices: frozenset[DeviceId]
    room: Mapping[NodeName, Room] = field(hash=False)


def end_of(job: RunningJob, *, tiers: Mapping[str, Tier], now: float) -> float:
    """When the gang's devices are expected free: now for evicted gangs (the end of their
    checkpoint grace for those asked for one first), never (inf) for long-running tiers, else
    its predicted end (`expected_end`), else its runtime bound."""
    if job.is_evicting:
        return max(now, job.evicting_by or now)
    tier = tiers.get(job.tier)
    if tier is not None and tier.long_running:
        return math.inf
    expected = expected_end(job, now=now)
    return math.inf if expected is None else expected


def expected_end(job: RunningJob, *, now: float) -> float | None:
    """The gang's predicted end, lengthened while the gang outlives it (rule 5), never past
    its bound `ends_at`; None for a gang with neither a prediction nor a bound.

    The lengthening steps from the prediction itself (`RuntimePredictor.outlived` at each
    predicted end in turn), so it depends only on the snapshot and `now`: a reservation built
    on an outlived gang moves in a few large steps, the same in every cycle between them."""
    ends = job.ends_at
    predicted_end = job.predicted_end_at
    if predicted_end is None:
        return ends
    if ends is not None:
        predicted_end = min(predicted_end, ends)
    predicted_s = predicted_end - job.started_at
    while job.started_at + predicted_s <= now and predicted_s > 0:
        longer = prediction.RuntimePredictor.outlived(
            predicted_s, elapsed_s=predicted_s, max_runtime_s=job.max_runtime_s
        )
        if longer <= predicted_s:
            break
        predicted_s = longer
    return job.started_at + predicted_s


def has_outlived(job: RunningJob, *, now: float) -> bool:
    """The gang runs past its first prediction: plans built on it have moved later."""
    return job.predicted_end_at is not None and job.predicted_end_at <= now < (
        job.ends_at if job.ends_at is not None else math.inf
    )


class Releases:
    """Gangs that will free their devices, earliest first (ties by uid for determinism),
    sorted only as far as read: every reservation of a cycle reads from the start, but all
    of them together read a few hundred of the thousands of running gangs."""

    def __init__(
        self, gangs: Iterable[RunningJob], *, tiers: Mapping[str, Tier], now: float
    ) -> None:
        self._gangs = tuple(gangs)
        self._unread = [
            (end, job.uid, index)
            for index, job in enumerate(self._gangs)
            if (end := end_of(job, tiers=tiers, now=now)) != math.inf
        ]
        """Not yet read: a heap by end, uid, then input order (as a stable sort would give).
        Entries name the gang by index: tuples of plain values leave the cyclic collector's
        view, and thousands of them live through the cycle."""
        heapq.heapify(self._unread)
        self._read: list[tuple[float, RunningJob]] = []

    def __iter__(self) -> Iterator[tuple[float, RunningJob]]:
        index = 0
        while index < len(self._read) or self._unread:
            if index == len(self._read):
                end, _, position = heapq.heappop(self._unread)
                self._read.append((end, self._gangs[position]))
            yield self._read[index]
            index += 1


def release_order(release: tuple[float, RunningJob]) -> tuple[float, str]:
    """Sort key of a release: its end, then the gang's uid (one order for equal ends)."""
    return (release[0], release[1].uid)


class _Timeline:
    """Nodes as gangs leave in end order, for one shape: each node's devices and room, and
    when it first could host a replica. Nodes are independent, so each ready time is exact."""

    def __init__(
        self,
        shape: placement.Shape,
        *,
        pool: Pool,
        excluded: frozenset[DeviceId],
        held_room: Mapping[NodeName, Room] | None,
    ) -> None:
        self._shape, self._pool, self._excluded = shape, pool, excluded
        self._held_room = held_room or {}
        self._view = pool.view(shape.selector)
        self._devices: dict[NodeName, list[Device]] = {}
        self._room: dict[NodeName, list[int]] = {}
        self.ready: dict[NodeName, tuple[float, list[Device]]] = {}
        self._per_domain: dict[str | None, int] = {}

    def _node(self, node: NodeName) -> list[Device]:
        devices = self._devices.get(node)
        if devices is None:
            free = self._view.by_node.get(node, ())
            devices = [d for d in free if d.id not in self._excluded]
            held = self._held_room.get(node, (0, 0, 0))
            self._devices[node] = devices
            self._room[node] = [-held[0], -held[1], -held[2]]
        return devices

    def release(self, node: NodeName, devices: tuple[Device, ...], *, pod: PodRequirements) -> None:
        self._node(node).extend(devices)
        room = self._room[node]
        room[0] += pod.cpu_milli
        room[1] += pod.memory_bytes
        room[2] += 1

    def check(self, node: NodeName, *, at: float) -> bool:
        """Record the node as ready at `at` if it now could host a replica; True when the whole
        gang fits (R ready nodes, in one domain when Required)."""
        shape = self._shape
        if node in self.ready or not self._pool.is_accepted(node, shape.pod):
            return False
        devices = self._node(node)
        count = shape.devices_per_replica
        if len(devices) < count or not self._pool.has_room(node, shape.pod, extra=self._room[node]):
            return False
        ordered = sorted(devices, key=_device_name)
        if placement.pick_devices(ordered, count, constraints=shape.constraints) is None:
            return False
        self.ready[node] = (at, ordered)
        domain = None
        if shape.topology.mode is TopologyMode.REQUIRED:
            domain = self._pool.inventory.nodes[node].labels.get(shape.topology.key)
            if domain is None:
                return False
        total = self._per_domain.get(domain, 0) + 1
        self._per_domain[domain] = total
        return total >= shape.replicas


def _device_name(device: Device) -> str:
    return device.name


def earliest_start(
    shape: placement.Shape,
    *,
    pool: Pool,
    releases: Iterable[tuple[float, RunningJob]],
    now: float,
    excluded: frozenset[DeviceId] = frozenset(),
    held_room: Mapping[NodeName, Room] | None = None,
) -> Start | None:
    """The earliest time the shape fits once gangs leave at their ends (`releases` in end
    order, read only as far as needed), and a placement then; None when it never fits."""
    timeline = _Timeline(shape, pool=pool, excluded=excluded, held_room=held_room)
    start: float | None = None
    outlived: list[JobKey] = []
    for node in pool.view(shape.selector).nodes_with_at_least(shape.devices_per_replica):
        if timeline.check(node, at=now):
            start = now
    if start is None:
        for end, gang in releases:
            if has_outlived(gang, now=now):
                outlived.append(gang.key)
            fits = False
            for node, matching in pool.held_matching(shape.selector, gang):
                timeline.release(node, matching, pod=gang.pod)
                fits = timeline.check(node, at=max(end, now)) or fits
            if fits:
                start = max(end, now)
                break
    if start is None:
        return None
    ready = timeline.ready
    usable = sorted(ready, key=lambda node: (len(ready[node][1]), node))
    choice = placement.select_nodes(
        shape,
        nodes=usable,
        devices_of=lambda node: ready[node][1],
        has_room=lambda node: True,
        known=pool.inventory.nodes,
    )
    if not isinstance(choice, list):
        return None
    return Start(at=start, choice=choice, outlived=tuple(outlived))


class Start(NamedTuple):
    """An earliest start: when, where, and the gangs it waits on that outlived their
    prediction (the reason a reservation moved later, rule 5)."""

    at: float
    choice: placement.Choice
    outlived: tuple[JobKey, ...]


def hold(
    reservation: BackfillReservation,
    choice: placement.Choice,
    *,
    pool: Pool,
    shape: placement.Shape,
) -> Hold:
    """What later jobs must leave alone now: reserved devices that are free, and pod room."""
    devices = frozenset(d.id for _, chosen in choice for d in chosen if d.id in pool.free)
    room = {node: (shape.pod.cpu_milli, shape.pod.memory_bytes, 1) for node, _ in choice}
    return Hold(reservation=reservation, devices=devices, room=room)


def merged(holds: Sequence[Hold]) -> tuple[frozenset[DeviceId], dict[NodeName, Room]]:
    devices: frozenset[DeviceId] = frozenset().union(*(h.devices for h in holds))
    room: dict[NodeName, Room] = {}
    for h in holds:
        for node, (cpu, memory, pods) in h.room.items():
            current = room.get(node, (0, 0, 0))
            room[node] = (current[0] + cpu, current[1] + memory, current[2] + pods)
    return devices, room
