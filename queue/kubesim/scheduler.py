"""A kube-scheduler with the DRA plugin: places ungated pods, allocates and reserves claims.

Owns the scheduling loop (woken by storage events), node choice (filters, then fewest pods),
claim allocation through `allocation.py`, the DRA PostFilter that frees a claim pinned to a
node the pod cannot use, the 1.36 PreBind refusal of allocations without allocationTimestamp,
binding and its `Scheduled` event, what a pending pod is told (the `Unschedulable` condition
and FailedScheduling event in kube-scheduler's words, corpus 10-38), and the resourceclaim
controller's release of reservations when a pod or a PodGroup is gone. Pods that name a
PodGroup go through the GangScheduling plugin (`gangscheduling.py`) when it is on. It must not
bypass the API rules: every write goes through the registry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.kubesim import allocation, claims, filters, kinds, reacting, status
from gangq.queue.kubesim.placement import Placement, View
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.storage import DELETED, Event
from gangq.queue.kubesim.validation import pods

if TYPE_CHECKING:
    from gangq.queue.kubesim.gangscheduling import GangScheduling

SCHEDULER_NAME = "default-scheduler"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_ON_NODE = "resourceclaim not available on the node"
RESOLVABLE = ("Insufficient cpu", "Insufficient memory", "Too many pods", filters.PORTS_TAKEN)
"""Filter failures preemption could cure (the others are UnschedulableAndUnresolvable)."""
_RESYNC_SECONDS = 1.0
log = logging.getLogger(__name__)


@dataclass(eq=False)
class Scheduler:
    registry: Registry
    matcher: DeviceMatcher = field(default_factory=DeviceMatcher)
    reasons: dict[str, str] = field(default_factory=dict)
    """Pod namespace/name -> why it is still pending (also posted as a FailedScheduling event)."""
    podgroups: bool = False
    """The GangScheduling plugin is on (feature gates GenericWorkload and GangScheduling)."""
    gang_cycles: dict[str, int] = field(default_factory=dict)
    """PodGroup namespace/name -> how many pod-group cycles the GangScheduling plugin ran for
    it: one per attempt to place its pending pods together, successful or not, including the
    retries of a group that cannot fit (see `gangscheduling.RETRY_SECONDS`)."""
    gangs: GangScheduling | None = field(default=None, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _woken: bool = True
    """A committed event arrived since the last pass (the react loop's wake-ups also come from
    timeouts: the resync, and retries of pod groups)."""
    _resync_at: float = 0.0
    _gone: list[dict[str, Any]] = field(default_factory=list)
    _candidates: set[tuple[str, str]] = field(default_factory=set)
    """Pods that were pending when last written, so a cycle need not scan every pod."""

    def __post_init__(self) -> None:
        if self.podgroups:
            # The plugin is built on this module (placement, binding, events): import it late.
            from gangq.queue.kubesim.gangscheduling import GangScheduling

            self.gangs = GangScheduling(self)

    def _track(self, pod: dict[str, Any], *, deleted: bool) -> None:
        key = (pod["metadata"].get("namespace") or "", pod["metadata"]["name"])
        if not deleted and _is_pending(pod):
            self._candidates.add(key)
        else:
            self._candidates.discard(key)

    def _on_event(self, event: Event) -> None:
        if event.resource == kinds.PODS.key:
            self._track(event.object, deleted=event.type == DELETED)
            if event.type == DELETED or _is_done(event.object):
                self._gone.append(event.object)
        if self.gangs is not None:
            self.gangs.observe(event)
            if event.resource == kinds.PODGROUPS.key:
                if event.type == DELETED:
                    self._gone.append(event.object)
                self._woken = True
                self._wake.set()
        if event.resource in (
            kinds.PODS.key,
            kinds.RESOURCE_CLAIMS.key,
            kinds.NODES.key,
            kinds.RESOURCE_SLICES.key,
        ):
            self._woken = True
            self._wake.set()

    async def run(self) -> None:
        for pod in self.registry.storage.items(kinds.PODS.key):
            self._track(pod, deleted=False)
            if self.gangs is not None:
                self.gangs.index(pod, deleted=False)
        await reacting.react(
            self.registry.storage,
            on_event=self._on_event,
            wake=self._wake,
            cycle=self._tick,
            timeout_s=self._timeout,
        )

    def _timeout(self) -> float:
        """The resync period, or sooner when a pod group is due for a retry."""
        due = self.gangs.next_retry() if self.gangs is not None else None
        if due is None:
            return _RESYNC_SECONDS
        return max(0.0, min(due, self._resync_at) - time.monotonic())

    def _tick(self) -> None:
        """A full pass after events or at the resync; otherwise only the pod groups whose retry
        is due, on the picture of the last pass (nothing they read has changed since: any change
        would have been an event)."""
        now = time.monotonic()
        woken, self._woken = self._woken, False
        if self.gangs is not None and not woken and now < self._resync_at and self.gangs.retry(now):
            return
        self.cycle()

    def cycle(self) -> None:
        """Release claims of gone pods and pod groups, then try every pending pod once (pods of
        a gang together, in one pod-group cycle)."""
        self._resync_at = time.monotonic() + _RESYNC_SECONDS
        gone, self._gone = self._gone, []
        for obj in gone:
            try:
                claims.release(self.registry, obj)
            except status.ApiError as error:
                log.debug("releasing claims of a gone pod: %s", error.message)
        storage = self.registry.storage
        found = (storage.peek(kinds.PODS.key, *key) for key in sorted(self._candidates))
        pending = [candidate for candidate in found if candidate and _is_pending(candidate)]
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        if self.gangs is not None:
            pending, groups = self.gangs.enqueue(pending)
        if not pending and not groups:
            return
        view = self.view()
        units = [(queue_order(pod), False, [pod]) for pod in pending]
        units += [(queue_order(members[0]), True, members) for members in groups.values()]
        if self.gangs is not None:
            self.gangs.view = view
        for _, gang, unit in sorted(units, key=lambda entry: entry[0]):
            if gang and self.gangs is not None:
                self.gangs.schedule(unit, view)
                continue
            try:
                self._schedule(unit[0], view)
            except status.ApiError as error:
                self._pending(unit[0], f"binding failed: {error.message}")

    def pending_pods(self, namespace: str, names: Iterable[str]) -> list[dict[str, Any]]:
        """The named pods that wait for a node, in queue order."""
        storage = self.registry.storage
        found = (
            storage.peek(kinds.PODS.key, namespace, name)
            for name in sorted(names)
            if (namespace, name) in self._candidates
        )
        return sorted((pod for pod in found if pod and _is_pending(pod)), key=queue_order)

    def view(self) -> View:
        """The cluster as this pass sees it: what bound pods use, the devices claims hold."""
        storage = self.registry.storage
        used: dict[str, dict[str, int]] = {}
        counts: dict[str, int] = {}
        ports: dict[str, set[filters.HostPort]] = {}
        for pod in storage.items(kinds.PODS.key):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                requests = filters.pod_requests(pod)
                totals = used.setdefault(node, {"cpu": 0, "memory": 0})
                for name, value in requests.items():
                    totals[name] += value
                counts[node] = counts.get(node, 0) + 1
                wanted = filters.host_ports(pod)
                if wanted:
                    ports.setdefault(node, set()).update(wanted)
        inventory = storage.derived(
            kinds.RESOURCE_SLICES.key, "allocatable-devices", allocation.published
        )
        return View(
            nodes=[dict(node) for node in storage.items(kinds.NODES.key)],
            used=used,
            counts=counts,
            ports=ports,
            devices=allocation.usage(storage.items(kinds.RESOURCE_CLAIMS.key), inventory),
            context=allocation.Context(
                inventory=inventory,
                classes={c["metadata"]["name"]: c for c in storage.items(kinds.DEVICE_CLASSES.key)},
                matcher=self.matcher,
            ),
        )

    def claims_of(self, pod: dict[str, Any]) -> list[dict[str, Any]] | str:
        """The pod's claims as stored (made from templates when needed), or why one is missing."""
        namespace = pod["metadata"]["namespace"]
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        pod_claims: list[dict[str, Any]] = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            if not name and entry.get("resourceClaimTemplateName"):
                name = claims.claim_from_template(self.registry, pod, entry)
            claim = self.registry.find(kinds.RESOURCE_CLAIMS, namespace, str(name))
            if claim is None:
                return f'resourceclaim "{name}" not found'
            pod_claims.append(claim)
        return pod_claims

    def _schedule(self, pod: dict[str, Any], view: View) -> None:
        pod_claims = self.claims_of(pod)
        if isinstance(pod_claims, str):
            self._pending(pod, pod_claims)
            return
        placement = self.place(pod, pod_claims, view)
        if not isinstance(placement, Placement):
            self.post_filter(pod_claims, placement)
            self._pending(pod, unschedulable_message(len(view.nodes), placement))
            return
        refusal = prebind_refusal(pod_claims)
        if refusal is not None:
            self._pending(pod, refusal)
            return
        if self.gangs is not None:
            self.gangs.basic_scheduled(pod)
        reference = {
            "resource": "pods",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
        for claim in pod_claims:
            results = placement.plan.get(claim["metadata"]["name"])
            self.reserve(claim, results, node=placement.node_name, reference=reference)
        self.bind(pod, placement.node_name, view)
        placement.devices.merge()

    def place(
        self, pod: dict[str, Any], pod_claims: list[dict[str, Any]], view: View
    ) -> Placement | dict[str, str]:
        """The first node (fewest pods, then name) that passes every filter and can give the
        pod's claims their devices, or each node's reason for refusing it."""
        rejected: dict[str, str] = {}
        for node in sorted(
            view.nodes,
            key=lambda n: (view.counts.get(n["metadata"]["name"], 0), n["metadata"]["name"]),
        ):
            name = node["metadata"]["name"]
            reason = filters.reject_reason(
                pod,
                node,
                used=view.used.get(name, {}),
                pod_count=view.counts.get(name, 0),
                ports=view.ports.get(name, ()),
            )
            if reason is not None:
                rejected[name] = reason
                continue
            trial = view.devices.child()
            plan = self._plan(pod_claims, node, view, trial)
            if isinstance(plan, str):
                rejected[name] = plan
                continue
            return Placement(node, plan, trial)
        return rejected

    def _plan(
        self,
        pod_claims: list[dict[str, Any]],
        node: dict[str, Any],
        view: View,
        trial: allocation.Usage,
    ) -> dict[str, list[dict[str, Any]]] | str:
        """New allocations for the pod's unallocated claims on this node (taken in `trial`),
        or kube-scheduler's reason for rejecting the node."""
        plan: dict[str, list[dict[str, Any]]] = {}
        for claim in pod_claims:
            existing = (claim.get("status") or {}).get("allocation")
            if existing:
                if not filters.matches_node_selector(existing.get("nodeSelector"), node):
                    return NOT_ON_NODE
                continue
            results = allocation.allocate(
                claim,
                view.context.inventory.devices.get(node["metadata"]["name"], []),
                used=trial,
                context=view.context,
            )
            if results is None:
                return CANNOT_ALLOCATE
            plan[claim["metadata"]["name"]] = results
        return plan

    def post_filter(self, pod_claims: list[dict[str, Any]], rejected: dict[str, str]) -> None:
        """Free a claim pinned to a node that fails the pod for another reason, when another
        node passes the non-device filters and no other pod holds the claim."""
        device_reasons = (NOT_ON_NODE, CANNOT_ALLOCATE)
        open_nodes = {name for name, reason in rejected.items() if reason in device_reasons}
        for claim in pod_claims:
            claim_status = claim.get("status") or {}
            allocated = claim_status.get("allocation")
            if not allocated or claim_status.get("reservedFor"):
                continue
            pinned = [
                n
                for n in rejected
                if filters.matches_node_selector(
                    allocated.get("nodeSelector"), {"metadata": {"name": n, "labels": {}}}
                )
            ]
            if (
                pinned
                and all(rejected[n] not in device_reasons for n in pinned)
                and open_nodes - set(pinned)
            ):
                claim_status.pop("allocation", None)
                self.registry.update(
                    kinds.RESOURCE_CLAIMS,
                    claim["metadata"]["namespace"],
                    claim["metadata"]["name"],
                    claim,
                    subresource="status",
                )

    def bind(self, pod: dict[str, Any], node: str, view: View | None) -> None:
        """POST the binding, write the `Scheduled` event and count the pod on its node (a
        pod-group cycle counted it when it placed it: `view` None)."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        pods.bind(self.registry, namespace, name, node)
        self.event(
            pod,
            reason="Scheduled",
            kind="Normal",
            action="Binding",
            note=f"Successfully assigned {namespace}/{name} to {node}",
        )
        if view is not None:
            view.take(pod, node)
        self.reasons.pop(f"{namespace}/{name}", None)

    def event(
        self,
        pod: dict[str, Any],
        *,
        reason: str,
        kind: str,
        action: str,
        note: str,
        series: dict[str, Any] | None = None,
    ) -> None:
        """An events.k8s.io/v1 event about the pod, as kube-scheduler's recorder writes them:
        `Scheduled` per bound pod (10-35), FailedScheduling of a pod group's pods (12-30)."""
        metadata = pod["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        event = {
            "metadata": {"generateName": f"{name}."},
            "regarding": {
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": metadata["uid"],
                "apiVersion": "v1",
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "note": note,
            "reason": reason,
            "type": kind,
            "action": action,
            "eventTime": self.event_time(),
            "reportingController": SCHEDULER_NAME,
            "reportingInstance": f"{SCHEDULER_NAME}-kubesim",
        }
        if series is not None:
            event["series"] = series
        try:
            self.registry.create(kinds.EVENTS_V1, namespace, event)
        except status.ApiError as error:
            log.debug("event for %s/%s not recorded: %s", namespace, name, error.message)

    def event_time(self) -> str:
        """A MicroTime, as events.k8s.io/v1 needs (fractional seconds, UTC)."""
        return self.registry.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def reserve(
        self,
        claim: dict[str, Any],
        results: list[dict[str, Any]] | None,
        *,
        node: str,
        reference: dict[str, str],
        again: bool = False,
    ) -> None:
        """Like kube-scheduler: protect the claim with a finalizer, then write allocation and
        reservedFor in one status write (corpus 5-42); pre-allocated claims only get reserved.
        `again` adds the reference even when the claim lists it already (a pod group's claim,
        which each pod of the group's cycle reserves, corpus 12-74)."""
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        current = claim
        if results is not None:
            finalizers = current["metadata"].setdefault("finalizers", [])
            if claims.DELETE_PROTECTION not in finalizers:
                finalizers.append(claims.DELETE_PROTECTION)
                current = self.registry.update(
                    kinds.RESOURCE_CLAIMS, namespace, name, current
                ).object
            selector = {"key": "metadata.name", "operator": "In", "values": [node]}
            current["status"] = {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
                    "allocationTimestamp": self.registry.now(),
                }
            }
        reserved = current.setdefault("status", {}).setdefault("reservedFor", [])
        if again or not any(entry.get("uid") == reference["uid"] for entry in reserved):
            reserved.append(reference)
        self.registry.update(kinds.RESOURCE_CLAIMS, namespace, name, current, subresource="status")

    def unschedulable(self, pod: dict[str, Any], message: str, *, reason: str) -> None:
        """The PodScheduled=False condition kube-scheduler writes with each new message
        (reason Unschedulable, or SchedulerError when a step failed rather than a filter)."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        current = self.registry.find(kinds.PODS, namespace, name)
        if current is None or current["metadata"].get("uid") != pod["metadata"].get("uid"):
            return
        previous: dict[str, Any] = next(
            (
                c
                for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "False"
            ),
            {},
        )
        condition = {
            "type": "PodScheduled",
            "observedGeneration": current["metadata"].get("generation", 1),
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": previous.get("lastTransitionTime") or self.registry.now(),
            "reason": reason,
            "message": message,
        }
        pods.set_condition(current, condition)
        try:
            self.registry.update(kinds.PODS, namespace, name, current, subresource="status")
        except status.ApiError as error:
            log.debug("condition of %s/%s not written: %s", namespace, name, error.message)

    def _pending(self, pod: dict[str, Any], reason: str) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if self.reasons.get(key) == reason:
            return
        self.reasons[key] = reason
        log.debug("pod %s pending: %s", key, reason)
        self.unschedulable(pod, reason, reason="Unschedulable")
        event = {
            "metadata": {"generateName": f"{pod['metadata']['name']}."},
            "involvedObject": {
                "kind": "Pod",
                "namespace": pod["metadata"]["namespace"],
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
                "apiVersion": "v1",
            },
            "reason": "FailedScheduling",
            "message": reason,
            "type": "Warning",
            "source": {"component": SCHEDULER_NAME},
            "count": 1,
            "firstTimestamp": self.registry.now(),
            "lastTimestamp": self.registry.now(),
        }
        try:
            self.registry.create(kinds.EVENTS, pod["metadata"]["namespace"], event)
        except status.ApiError as error:
            log.debug("event for %s not recorded: %s", key, error.message)


def queue_order(pod: dict[str, Any]) -> tuple[int, str]:
    """kube-scheduler's active queue: higher priority first, then the older pod."""
    return (
        -int((pod.get("spec") or {}).get("priority") or 0),
        pod["metadata"].get("creationTimestamp", ""),
    )


def prebind_refusal(pod_claims: list[dict[str, Any]]) -> str | None:
    """The 1.36 PreBind refusal of an allocation written without allocationTimestamp."""
    for claim in pod_claims:
        existing = (claim.get("status") or {}).get("allocation")
        if existing and not existing.get("allocationTimestamp"):
            return (
                f'claim "{claim["metadata"]["name"]}": allocation has no allocationTimestamp; '
                "adding it is rejected: status.allocation: field is immutable"
            )
    return None


def unschedulable_message(node_count: int, rejected: dict[str, str]) -> str:
    """kube-scheduler's FitError text: a histogram of per-node reasons sorted as strings,
    then what preemption found (corpus 10-38); this scheduler never preempts."""
    if not rejected:
        return "no nodes available to schedule pods"
    preemption = {
        name: (
            "No preemption victims found for incoming pod"
            if reason in RESOLVABLE
            else "Preemption is not helpful for scheduling"
        )
        for name, reason in rejected.items()
    }
    return (
        f"0/{node_count} nodes are available: {_histogram(rejected)}. still not schedulable, "
        f"preemption: 0/{node_count} nodes are available: {_histogram(preemption)}."
    )


def _histogram(reasons: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons.values():
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def _is_done(pod: dict[str, Any]) -> bool:
    """No container of the pod runs or ever will: the resourceclaim controller then drops it
    from its claims' reservedFor (upstream `isPodDone`: a terminal phase, or deleted before it
    was scheduled), though the pod object stays."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or bool(
        pod["metadata"].get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName")
    )


def _is_pending(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and not spec.get("schedulingGates")
        and not pod["metadata"].get("deletionTimestamp")
        and spec.get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )
