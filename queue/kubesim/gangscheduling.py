"""kube-scheduler's GangScheduling plugin (1.36 alpha) and its pod-group cycle.

Owns what becomes of a pending pod that names a PodGroup in `spec.schedulingGroup`. PreEnqueue
holds it, with no condition and no event, while the group does not exist or while fewer than
`minCount` of the group's active pods exist (gated ones count, finished or deleting ones do
not, corpus 12-16..12-21, 12-55..12-57, 12-98..12-102). A `basic` group's pods are scheduled
one by one. A `gang` group's pending pods go through one pod-group cycle: each is placed
counting the others' tentative placements (ports, cpu, devices), and when the bound members
plus the placed ones reach `minCount` all are bound in the same synchronous step, so no reader
ever sees part of them bound (kube-scheduler posts one Binding per pod, the last 0.05-0.16 s
after the first, 12-23, 12-41); otherwise none is (12-27..12-32). Also the PodGroupScheduled
condition, what each pod is told and the events about it, the retries of a group that cannot
be placed (`RETRY_SECONDS`) or waits for gated pods or a failed binding step (back-off), and
the DRAWorkloadResourceClaims reservation of a group's shared claims for the PodGroup
(12-69..12-75). A retry that changes nothing writes nothing; `Scheduler.gang_cycles` counts
the cycles. It must not bypass the API rules: every write goes through the registry.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.kubesim import kinds, status
from gangq.queue.kubesim.placement import Placement, View
from gangq.queue.kubesim.scheduler import (
    Scheduler,
    prebind_refusal,
    queue_order,
    unschedulable_message,
)
from gangq.queue.kubesim.storage import DELETED, MODIFIED, Event
from gangq.queue.kubesim.validation import scheduling

RETRY_SECONDS = 0.001
"""How soon a gang that cannot be placed is tried again. kube-scheduler retries it with no
back-off at all: 2,100-3,500 pod-group cycles per second in the capture (12-118), at 45 % of a
CPU, writing nothing. The emulator bounds the rate, and a retry on an unchanged cluster (any
change is an event, which brings a full pass that places the pods again) repeats the last
cycle's verdict without placing the pods, so a stuck gang costs little. Count its cycles with
`Scheduler.gang_cycles`."""
BACKOFF_SECONDS = (1.0, 10.0)
"""kube-scheduler's default pod back-off (initial, maximum; doubling each time) for a gang that
is only short of pods because some are gated (12-37, 12-38) and for a member whose binding step
failed (12-74, 12-75)."""
CONDITION = "PodGroupScheduled"
WAITING = (
    "pod group is unschedulable, waiting for minCount pods from a gang to be scheduled, one or "
    "more plugins asked to wait and no plugin rejected pod"
)
"""What a placed member of a gang that could not be placed as a whole is told (12-29, 12-37)."""
UNSCHEDULABLE = "pod group is unschedulable"
"""The PodGroup's own message when its gang could not be placed (12-32)."""
GroupKey = tuple[str, str]
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Retry:
    due: float
    backoff: float
    """The back-off this retry waited; 0 for a gang that cannot be placed (retried at once)."""
    verdict: tuple[tuple[dict[str, Any], str], ...] = ()
    """What each member of a gang that cannot be placed was told, which a retry repeats."""


@dataclass(slots=True)
class _Placed:
    pod: dict[str, Any]
    claims: list[dict[str, Any]]
    placement: Placement


def group_of(pod: dict[str, Any]) -> GroupKey | None:
    name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return (str(pod["metadata"].get("namespace") or ""), str(name)) if name else None


def _active(pod: dict[str, Any]) -> bool:
    """Counts toward minCount: neither finished nor being deleted."""
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return not finished and not pod["metadata"].get("deletionTimestamp")


def _allocated(
    claim: dict[str, Any], results: list[dict[str, Any]], node: str, when: str
) -> dict[str, Any]:
    """The claim as a later member of the same cycle sees it: allocated on the node where an
    earlier member's placement put it (that member's binding step writes the allocation)."""
    selector = {"key": "metadata.name", "operator": "In", "values": [node]}
    allocation = {
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        "allocationTimestamp": when,
    }
    return {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}


def _reserved_for(claim: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])


@dataclass(eq=False)
class GangScheduling:
    scheduler: Scheduler
    view: View | None = None
    """The picture of the last full pass, which retries reuse (None: build a new one)."""
    _members: dict[GroupKey, set[str]] = field(default_factory=dict)
    """Names of the pods that name each group (the field is immutable)."""
    _retries: dict[GroupKey, _Retry] = field(default_factory=dict)
    _touched: set[GroupKey] = field(default_factory=set)
    """Groups whose pods or PodGroup changed since their last cycle (kube-scheduler's queueing
    hints move such a group out of back-off)."""
    _told: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Pod namespace/name -> the message of its last FailedScheduling events and how many were
    written for it (the recorder writes one, then one with a series, then nothing, 12-30)."""

    # --- what the plugin watches --------------------------------------------------------

    def index(self, pod: dict[str, Any], *, deleted: bool) -> None:
        key = group_of(pod)
        if key is None:
            return
        name = pod["metadata"]["name"]
        if deleted:
            members = self._members.get(key, set())
            members.discard(name)
            if not members:
                self._members.pop(key, None)
            self._told.pop(f"{key[0]}/{name}", None)
        else:
            self._members.setdefault(key, set()).add(name)

    def observe(self, event: Event) -> None:
        """Keep the member index; a group whose pods or PodGroup were created, deleted or had
        their spec changed (a gate lifted, a binding) is touched."""
        if event.resource == kinds.PODS.key:
            self.index(event.object, deleted=event.type == DELETED)
            key = group_of(event.object)
        elif event.resource == kinds.PODGROUPS.key:
            metadata = event.object["metadata"]
            key = (str(metadata.get("namespace") or ""), str(metadata["name"]))
        else:
            return
        previous = (event.previous or {}).get("spec")
        if key is not None and (event.type != MODIFIED or previous != event.object.get("spec")):
            self._touched.add(key)

    # --- PreEnqueue -------------------------------------------------------------------

    def enqueue(
        self, pending: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[GroupKey, list[dict[str, Any]]]]:
        """The pods scheduled one by one, and the gangs whose cycle runs now (their pending
        members in queue order); pods of a missing group wait without a word."""
        self.view = None
        singles: list[dict[str, Any]] = []
        gangs: dict[GroupKey, list[dict[str, Any]]] = {}
        for pod in pending:
            key = group_of(pod)
            group = None if key is None else self._group(key)
            if key is None:
                singles.append(pod)
            elif group is None:
                continue
            elif ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") is None:
                singles.append(pod)
            else:
                gangs.setdefault(key, []).append(pod)
        for key in set(self._retries) - set(gangs):
            del self._retries[key]
        self._touched &= set(gangs)
        now = time.monotonic()
        ready = {key: members for key, members in gangs.items() if self._ready(key, now)}
        return singles, {key: sorted(members, key=queue_order) for key, members in ready.items()}

    def _ready(self, key: GroupKey, now: float) -> bool:
        retry = self._retries.get(key)
        return retry is None or not retry.backoff or key in self._touched or retry.due <= now

    def _group(self, key: GroupKey) -> dict[str, Any] | None:
        return self.scheduler.registry.storage.peek(kinds.PODGROUPS.key, *key)

    # --- retries ----------------------------------------------------------------------

    def next_retry(self) -> float | None:
        """When the next gang is due to be tried again (time.monotonic), if any is."""
        return min((retry.due for retry in self._retries.values()), default=None)

    def retry(self, now: float) -> bool:
        """Try the gangs that are due again; False when none is."""
        due = [key for key, retry in self._retries.items() if retry.due <= now]
        if not due:
            return False
        for key in due:
            retry = self._retries[key]
            if retry.verdict:
                self._count(key)
                for pod, message in retry.verdict:
                    self._failed(pod, message, reason="Unschedulable")
                retry.due = now + RETRY_SECONDS
                continue
            members = self.scheduler.pending_pods(key[0], self._members.get(key, ()))
            if not members or self._group(key) is None:
                del self._retries[key]
                continue
            if self.view is None:
                self.view = self.scheduler.view()
            self.schedule(members, self.view)
        return True

    def _back_off(self, key: GroupKey, now: float) -> None:
        previous = self._retries.get(key)
        initial, ceiling = BACKOFF_SECONDS
        backoff = min(previous.backoff * 2, ceiling) if previous and previous.backoff else initial
        self._retries[key] = _Retry(due=now + backoff, backoff=backoff)

    # --- the pod-group cycle ----------------------------------------------------------

    def schedule(self, members: list[dict[str, Any]], view: View) -> None:
        """One pod-group cycle for a gang's pending members (after PreEnqueue's count)."""
        key = group_of(members[0])
        if key is None:
            return
        group = self._group(key)
        if group is None:
            self._retries.pop(key, None)
            return
        need = scheduling.min_count((group.get("spec") or {}).get("schedulingPolicy") or {})
        storage = self.scheduler.registry.storage
        found = (storage.peek(kinds.PODS.key, key[0], n) for n in self._members.get(key, ()))
        active = [pod for pod in found if pod is not None and _active(pod)]
        if len(active) < need:
            self._retries.pop(key, None)
            return
        self._count(key)
        bound = sum(1 for pod in active if (pod.get("spec") or {}).get("nodeName"))
        trial = view.trial()
        placed, failures = self._place(members, trial)
        now = time.monotonic()
        if bound + len(placed) >= need:
            if placed:
                self._condition(group, "True", "Scheduled", "")
            retry = self._bind(group, placed)
            view.adopt(trial)
            for pod, message in failures:
                self._failed(pod, message, reason="Unschedulable")
            if retry:
                self._back_off(key, now)
            else:
                self._retries.pop(key, None)
        else:
            for entry in placed:
                self._failed(entry.pod, WAITING, reason="Unschedulable")
            for pod, message in failures:
                self._failed(pod, message, reason="Unschedulable")
            self._condition(group, "False", "Unschedulable", UNSCHEDULABLE)
            if failures:
                verdict = (*((entry.pod, WAITING) for entry in placed), *failures)
                self._retries[key] = _Retry(now + RETRY_SECONDS, 0.0, verdict)
            else:
                self._back_off(key, now)
        self._touched.discard(key)

    def _count(self, key: GroupKey) -> None:
        counter = f"{key[0]}/{key[1]}"
        self.scheduler.gang_cycles[counter] = self.scheduler.gang_cycles.get(counter, 0) + 1

    def _place(
        self, members: list[dict[str, Any]], trial: View
    ) -> tuple[list[_Placed], list[tuple[dict[str, Any], str]]]:
        """Each member where it fits given the members placed before it; the others with
        kube-scheduler's FitError (after the DRA PostFilter, as for a single pod)."""
        placed: list[_Placed] = []
        failures: list[tuple[dict[str, Any], str]] = []
        seen: dict[str, dict[str, Any]] = {}
        """Claims as this cycle's placements left them."""
        for pod in members:
            pod_claims = self.scheduler.claims_of(pod)
            if isinstance(pod_claims, str):
                failures.append((pod, pod_claims))
                continue
            pod_claims = [seen.get(claim["metadata"]["name"], claim) for claim in pod_claims]
            placement = self.scheduler.place(pod, pod_claims, trial)
            if not isinstance(placement, Placement):
                self.scheduler.post_filter(pod_claims, placement)
                failures.append((pod, unschedulable_message(len(trial.nodes), placement)))
                continue
            placement.devices.merge()
            trial.take(pod, placement.node_name)
            for claim in pod_claims:
                results = placement.plan.get(claim["metadata"]["name"])
                if results is not None:
                    seen[claim["metadata"]["name"]] = _allocated(
                        claim, results, placement.node_name, self.scheduler.registry.now()
                    )
            placed.append(_Placed(pod, pod_claims, placement))
        return placed, failures

    def _bind(self, group: dict[str, Any], placed: list[_Placed]) -> bool:
        """Reserve the claims of every placed member and bind it, all in this synchronous
        step; True when a member's binding step failed (it is tried again after a back-off)."""
        failed = False
        for entry in placed:
            metadata = entry.pod["metadata"]
            problem = self._reserve(entry, group)
            if problem is None:
                try:
                    self.scheduler.bind(entry.pod, entry.placement.node_name, None)
                except status.ApiError as error:
                    problem = f"binding failed: {error.message}"
            if problem is not None:
                failed = True
                self._failed(entry.pod, problem, reason="SchedulerError")
                continue
            self._told.pop(f"{metadata['namespace']}/{metadata['name']}", None)
        return failed

    def _reserve(self, entry: _Placed, group: dict[str, Any]) -> str | None:
        """DynamicResources' PreBind for one member: its own claims are reserved for the pod,
        the group's shared ones (same entry name and claim as the PodGroup's
        `spec.resourceClaims`) for the PodGroup. Whether a group claim needs the reservation is
        decided when the member is placed, as kube-scheduler does, so the second member of a
        cycle adds it again and is refused (12-74). Returns why the step failed, if it did."""
        refusal = prebind_refusal(entry.claims)
        if refusal is not None:
            return refusal
        pod = entry.pod
        namespace, group_uid = pod["metadata"]["namespace"], str(group["metadata"]["uid"])
        shared = {
            (c.get("name"), c.get("resourceClaimName"))
            for c in (group.get("spec") or {}).get("resourceClaims") or []
        }
        for_group = {
            str(c.get("resourceClaimName"))
            for c in (pod.get("spec") or {}).get("resourceClaims") or []
            if (c.get("name"), c.get("resourceClaimName")) in shared
        }
        group_reference = {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": group["metadata"]["name"],
            "uid": group_uid,
        }
        pod_reference = {
            "resource": "pods",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
        for claim in entry.claims:
            name = claim["metadata"]["name"]
            results = entry.placement.plan.get(name)
            if name in for_group and results is None and _reserved_for(claim, group_uid):
                continue
            current = self.scheduler.registry.find(kinds.RESOURCE_CLAIMS, namespace, name)
            if current is None:
                return f'resourceclaim "{name}" not found'
            try:
                self.scheduler.reserve(
                    current,
                    results,
                    node=entry.placement.node_name,
                    reference=group_reference if name in for_group else pod_reference,
                    again=name in for_group and results is None,
                )
            except status.ApiError as error:
                return (
                    'running PreBind plugin "DynamicResources": add reservation to claim '
                    f"{namespace}/{name}: {error.message}"
                )
        return None

    # --- what is written about it ------------------------------------------------------

    def basic_scheduled(self, pod: dict[str, Any]) -> None:
        """A `basic` group is Scheduled once one of its pods is (written before the binding,
        as kube-scheduler does, 12-59, 12-60)."""
        key = group_of(pod)
        group = None if key is None else self._group(key)
        if group is not None:
            self._condition(group, "True", "Scheduled", "")

    def _condition(self, group: dict[str, Any], state: str, reason: str, message: str) -> None:
        """PodGroupScheduled through the status subresource, only when it changes."""
        conditions = (group.get("status") or {}).get("conditions") or []
        previous: dict[str, Any] = next((c for c in conditions if c.get("type") == CONDITION), {})
        if (previous.get("status"), previous.get("reason"), previous.get("message")) == (
            state,
            reason,
            message,
        ):
            return
        registry = self.scheduler.registry
        namespace, name = group["metadata"]["namespace"], group["metadata"]["name"]
        current = registry.find(kinds.PODGROUPS, namespace, name)
        if current is None:
            return
        condition = {
            "type": CONDITION,
            "status": state,
            "lastTransitionTime": previous.get("lastTransitionTime")
            if previous.get("status") == state
            else registry.now(),
            "reason": reason,
            "message": message,
        }
        group_status = current.setdefault("status", {})
        kept = [c for c in group_status.get("conditions") or [] if c.get("type") != CONDITION]
        group_status["conditions"] = [*kept, condition]
        try:
            registry.update(kinds.PODGROUPS, namespace, name, current, subresource="status")
        except status.ApiError as error:
            log.debug("condition of PodGroup %s/%s not written: %s", namespace, name, error.message)

    def _failed(self, pod: dict[str, Any], message: str, *, reason: str) -> None:
        """The pod's PodScheduled=False condition and FailedScheduling events: one event, then
        one with `series.count` 2 when the next cycle says the same, then nothing (12-30)."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        told, count = self._told.get(key, ("", 0))
        if told == message and count >= 2:
            return
        self.scheduler.reasons[key] = message
        self.scheduler.unschedulable(pod, message, reason=reason)
        again = told == message
        series = {"count": 2, "lastObservedTime": self.scheduler.event_time()} if again else None
        self.scheduler.event(
            pod,
            reason="FailedScheduling",
            kind="Warning",
            action="Scheduling",
            note=message,
            series=series,
        )
        self._told[key] = (message, 2 if again else 1)
