"""Whether a job can ever run: a spec to fix (invalid) or a cluster that cannot hold it.

Owns two judgements, both pure. `invalid_reason` is about the spec against gangq's
configuration (tier, device class, CEL syntax, topology): the edge calls it before queueing and
the cycle again for jobs queued before the configuration changed. `NeverFit` is about the
cluster as configured: a job no device matches (a CEL evaluation error is named as such), more
devices per replica than any node has, more than the tenant may ever use, a topology key no
node carries, or a gang larger than what long-running gangs it may not evict leave. Such a job
is not waiting for anything: it holds no position and no reservation, and is judged afresh every
cycle, so a new node, quota or tier lets it wait (and run) again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from gangq.queue.core import derived, explain, fit, placement, quantity, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import SelectorError
from gangq.queue.core.model import (
    Inventory,
    NodeName,
    PendingJob,
    PodRequirements,
    Policy,
    RunningJob,
    Tier,
    TopologyMode,
)
from gangq.queue.core.pool import Pool, SelectorKey
from gangq.queue.core.quota import QuotaBook

Lasting = tuple[str, ...]
"""Names of the long-running tiers a job may not evict (those at or above its own)."""


def _short(name: str) -> str:
    return name.rpartition("/")[2] or name


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def invalid_reason(
    job: PendingJob, *, policy: Policy, inventory: Inventory, matcher: DeviceMatcher
) -> explain.PendingReason | None:
    """Input a person must fix: the job cannot run however long it waits. The answer depends
    only on tier, device class, selectors, topology mode, whether a topology key is set and
    the counts being positive. A managed class whose DeviceClass is missing or broken is the
    cluster's problem, not the job's: `NeverFit` reports it."""
    tiers = [tier.name for tier in policy.tiers]
    if job.tier not in tiers:
        return explain.invalid(f"spec.tier: unknown tier {job.tier!r} (known: {', '.join(tiers)})")
    if job.replicas < 1 or job.devices_per_replica < 1:
        return explain.invalid("replicas and devicesPerReplica must be at least 1")
    managed = policy.managed_device_classes
    if managed and job.device_class not in managed:
        return explain.invalid(
            f"spec.deviceClassName: device class {job.device_class!r} is not managed by gangq "
            f"(managed: {', '.join(managed)})"
        )
    device_class = inventory.device_classes.get(job.device_class)
    if device_class is None and not managed:
        return explain.invalid(f"device class {job.device_class!r} does not exist")
    if job.topology.mode is not TopologyMode.NONE and not job.topology.key:
        return explain.invalid(f"topology mode {job.topology.mode} needs a topology key")
    try:
        for expression in job.selectors:
            matcher.program(expression)
    except SelectorError as error:
        return explain.invalid(f"spec.selectors: {error}")
    return None


_accepting_nodes: derived.PerInventory[dict[PodRequirements, frozenset[NodeName]]] = (
    derived.PerInventory(lambda inventory: {})
)
"""Per pod, the nodes whose configuration admits it: a fact of the inventory's nodes, asked
by every cycle for every kind of queued pod (filled as cycles ask; see `derived`)."""


class NeverFit:
    """Judges, once per cycle and shape, whether a valid job could ever be placed."""

    def __init__(
        self,
        *,
        pool: Pool,
        book: QuotaBook,
        tiers: Mapping[str, Tier],
        running: Iterable[RunningJob],
    ) -> None:
        self._pool = pool
        self._book = book
        self._tiers = tiers
        self._running = tuple(running)
        self._kinds: dict[tuple[object, ...], explain.PendingReason | None] = {}
        self._shapes: dict[tuple[placement.Shape, Lasting], explain.PendingReason | None] = {}
        self._lasting_tiers = {
            rank: tuple(sorted(t.name for t in tiers.values() if t.long_running and t.rank >= rank))
            for rank in {t.rank for t in tiers.values()}
        }
        """Per tier rank, the long-running tiers a job of that rank may not evict: jobs of
        ranks that share them share every answer below."""
        self._lasting: dict[tuple[str, Lasting], tuple[RunningJob, ...]] = {}
        self._per_node: dict[SelectorKey, tuple[Mapping[str, int], int]] = {}
        self._held_by: dict[tuple[SelectorKey, Lasting], dict[NodeName, int]] = {}
        self._touched_by: dict[tuple[str, Lasting], frozenset[NodeName]] = {}
        self._capable_by: dict[tuple[SelectorKey, int, PodRequirements], list[NodeName]] = {}

    def judge(self, job: PendingJob) -> explain.PendingReason | None:
        """Why the job can never run here, or None when waiting may help: first the cluster
        (what no quota could change), then the tenant's quota. Jobs alike share one answer."""
        kind = (
            job.device_class,
            job.selectors,
            job.capacity_requests,
            job.replicas,
            job.devices_per_replica,
            job.constraints,
            job.topology,
            job.pod,
            job.tier,
            job.tenant,
        )
        try:
            return self._kinds[kind]
        except KeyError:
            verdict = self._kinds[kind] = self._judge(job)
            return verdict

    def _judge(self, job: PendingJob) -> explain.PendingReason | None:
        rank = self._tiers[job.tier].rank
        shape = placement.Shape.of(job)
        tiers = self._lasting_tiers[rank]
        memo_key = (shape, tiers)
        if memo_key not in self._shapes:
            self._shapes[memo_key] = self._judge_shape(shape, tiers=tiers)
        if self._shapes[memo_key] is not None:
            return self._shapes[memo_key]
        quota = self._book.quota(job.tenant, job.device_class)
        if quota.allowed_tiers and job.tier not in quota.allowed_tiers:
            return explain.unschedulable(
                f"tenant {job.tenant} may not use tier {job.tier} "
                f"(allowed: {', '.join(quota.allowed_tiers)}): use an allowed tier"
            )
        limit = quota.nominal + quota.borrowing_limit
        if job.equivalent_milli > limit * sharing.WHOLE:
            needed = sharing.format_equivalent(job.equivalent_milli)
            return explain.unschedulable(
                f"needs {needed} {job.device_class}, more than tenant {job.tenant} "
                f"may ever use (nominal {quota.nominal} + borrowing limit "
                f"{quota.borrowing_limit} = {limit}): ask for fewer devices or a larger quota"
            )
        return None

    def _judge_shape(
        self, shape: placement.Shape, *, tiers: Lasting
    ) -> explain.PendingReason | None:
        key = shape.selector
        device_class, selectors, _ = key
        pool = self._pool
        if device_class not in pool.inventory.device_classes:
            return explain.unschedulable(
                f"device class {device_class!r} is managed by gangq but no DeviceClass of that "
                "name exists: an administrator must create it"
            )
        try:
            for expression in pool.inventory.device_classes[device_class].selectors:
                pool.matcher.program(expression)
        except SelectorError as error:
            return explain.unschedulable(
                f"DeviceClass {device_class}: {error}: an administrator must fix it"
            )
        per_node, most = self._matching(key)
        if not per_node:
            return self._nothing_matches(key)
        if key[2] and not self._serves(key):
            asked = ", ".join(f"{name} {quantity.format_milli(amount)}" for name, amount in key[2])
            return explain.unschedulable(
                f"no {device_class} device matching the job's selectors can give {asked} "
                "(too little capacity, or its request policy allows no such share): change "
                "spec.capacity.requests"
            )
        count = shape.devices_per_replica
        if most < count:
            which = " matching the selectors" if selectors else ""
            return explain.unschedulable(
                f"needs {count} {device_class} per replica, the most any node has{which} is "
                f"{most}: lower devicesPerReplica"
            )
        capable = self._capable(key, count, shape.pod)
        problem = self._lacking(shape, capable, beside="")
        if problem is not None:
            return problem
        lasting = self._lasting_gangs(device_class, tiers=tiers)
        if not lasting:
            return None
        touched = self._touched(device_class, tiers=tiers, lasting=lasting)
        untouched = [n for n in capable if n not in touched]
        if self._lacking(shape, untouched, beside="") is None:
            return None
        held = self._held(key, tiers=tiers, lasting=lasting)
        left = [n for n in capable if n not in held or per_node[n] - held[n] >= count]
        if len(left) == len(capable):
            return None
        names = ", ".join(sorted({gang.key for gang in lasting})[:3])
        shown = ", ".join(sorted({gang.tier for gang in lasting}))
        return self._lacking(
            shape,
            left,
            beside=f" beside long-running jobs of tier {shown} it may not evict ({names})",
        )

    def _matching(self, key: SelectorKey) -> tuple[Mapping[str, int], int]:
        """Untainted devices matching `key` per node, free or not, and the most on one node."""
        found = self._per_node.get(key)
        if found is None:
            inventory = self._pool.inventory
            device_class, selectors, _ = key
            expressions = (*inventory.device_classes[device_class].selectors, *selectors)
            per_node = self._pool.matcher.count_by_node(expressions, inventory.devices)
            found = self._per_node[key] = (per_node, max(per_node.values(), default=0))
        return found

    def _capable(self, key: SelectorKey, count: int, pod: PodRequirements) -> list[NodeName]:
        """Nodes with `count` matching devices whose configuration admits the pod."""
        found = self._capable_by.get((key, count, pod))
        if found is None:
            per_node = self._matching(key)[0]
            accepting = self._accepting(pod)
            found = self._capable_by[(key, count, pod)] = [
                NodeName(n) for n, held in per_node.items() if held >= count and n in accepting
            ]
        return found

    def _accepting(self, pod: PodRequirements) -> frozenset[NodeName]:
        """Nodes whose configuration admits the pod (`fit.is_ever_accepted`)."""
        known = _accepting_nodes(self._pool.inventory)
        found = known.get(pod)
        if found is None:
            found = known[pod] = frozenset(
                name
                for name, node in self._pool.inventory.nodes.items()
                if fit.is_ever_accepted(node, pod)
            )
        return found

    def _touched(
        self, device_class: str, *, tiers: Lasting, lasting: tuple[RunningJob, ...]
    ) -> frozenset[NodeName]:
        """Nodes where lasting gangs hold anything: the others are surely left to the job."""
        found = self._touched_by.get((device_class, tiers))
        if found is None:
            found = self._touched_by[(device_class, tiers)] = frozenset(
                replica.node for gang in lasting for replica in gang.placement
            )
        return found

    def _held(
        self, key: SelectorKey, *, tiers: Lasting, lasting: tuple[RunningJob, ...]
    ) -> dict[NodeName, int]:
        """Devices matching `key` that lasting gangs hold, per node."""
        found = self._held_by.get((key, tiers))
        if found is None:
            found = self._held_by[(key, tiers)] = {}
            for gang in lasting:
                if key[1]:
                    held = [(n, len(d)) for n, d in self._pool.held_matching(key, gang)]
                else:  # the gang's devices are all of its class
                    held = [(r.node, len(r.devices)) for r in gang.placement]
                for node, count in held:
                    found[node] = found.get(node, 0) + count
        return found

    def _serves(self, key: SelectorKey) -> bool:
        """Some matching device could ever give the capacity the job requests."""
        pool = self._pool
        return any(
            sharing.consumption(device, key[2]) is not None and pool.is_matching(key, device)
            for device in pool.inventory.devices.values()
        )

    def _nothing_matches(self, key: SelectorKey) -> explain.PendingReason:
        device_class, selectors, _ = key
        class_selectors = self._pool.inventory.device_classes[device_class].selectors
        errors = self._pool.matcher.runtime_errors
        for expression in (*selectors, *class_selectors):
            if expression in errors:
                where = "spec.selectors" if expression in selectors else "the DeviceClass"
                return explain.unschedulable(
                    f"CEL selector {expression!r} fails to evaluate: {errors[expression]}: "
                    f"fix {where}"
                )
        if selectors and self._pool.capable_nodes((device_class, (), ()), 1):
            return explain.unschedulable(
                f"no {device_class} device matches the job's selectors: change spec.selectors"
            )
        return explain.unschedulable(
            f"no untainted {device_class} device is published on any node: "
            "its driver must publish some"
        )

    def _lacking(
        self, shape: placement.Shape, nodes: Collection[NodeName], *, beside: str
    ) -> explain.PendingReason | None:
        """None when `nodes` could hold the gang, else what the gang lacks."""
        wanted, count = shape.replicas, shape.devices_per_replica
        device_class = shape.selector[0]
        need = f"needs {_plural(wanted, 'node')} with {count} {device_class}"
        if shape.topology.mode is not TopologyMode.REQUIRED:
            if len(nodes) >= wanted:
                return None
            return explain.unschedulable(
                f"{need}, the cluster has {len(nodes)}{beside}: ask for fewer replicas"
            )
        key = shape.topology.key
        per_domain: dict[str, int] = {}
        labels = self._pool.inventory.nodes
        for node in nodes:
            domain = labels[node].labels.get(key)
            if domain is not None:
                per_domain[domain] = per_domain.get(domain, 0) + 1
        if any(found >= wanted for found in per_domain.values()):
            return None
        if not any(key in node.labels for node in labels.values()):
            return explain.unschedulable(
                f"no node carries topology key {key}: fix topology.key or use mode Preferred"
            )
        domain = _short(key)
        best = max(per_domain.values(), default=0)
        return explain.unschedulable(
            f"{need} in one {domain}, the largest {domain} has {best}{beside}: ask for fewer "
            "replicas or use topology mode Preferred"
        )

    def _lasting_gangs(self, device_class: str, *, tiers: Lasting) -> tuple[RunningJob, ...]:
        """Gangs that never end by themselves and that the job may not evict: those of the
        long-running `tiers` at or above its own, not borrowing (borrowed devices can be
        reclaimed) and not being evicted already."""
        memo_key = (device_class, tiers)
        found = self._lasting.get(memo_key)
        if found is None:
            found = ()
            if tiers:
                found = tuple(
                    gang
                    for gang in self._running
                    if gang.tier in tiers
                    and gang.device_class == device_class
                    and not gang.is_evicting
                    and gang.borrowed == 0
                )
            self._lasting[memo_key] = found
        return found
