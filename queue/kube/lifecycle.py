"""What a gang holding devices needs next, read from its TrainingJob, pods, claims and nodes.

Owns the lifecycle rules of PRODUCT rule 8 and §5 as one pure function, `assess`: released or
not, Ready, succeeded, failed (a failed or lost pod, a NotReady node, a NoExecute device taint,
an allocation gangq did not write), startup timeout, deletion, eviction. It performs no I/O; the
actuator carries the verdict out.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.core import model
from gangq.queue.kube import objects

ENDING_ANNOTATION = "gangq.dev/ending"
"""On the TrainingJob: how the current admission ends (JSON), written before teardown starts."""


class Action(enum.StrEnum):
    BUILD = "build"
    """Create what is missing (Service, claims with allocation, gated pods); release when whole."""
    WAIT = "wait"
    MARK_RUNNING = "mark_running"
    RESTART_IN_PLACE = "restart_in_place"
    TEARDOWN = "teardown"


class Ending(enum.StrEnum):
    REQUEUE = "requeue"
    PREEMPTED = "preempted"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class Gang:
    """One admitted gang as the caches show it."""

    key: model.JobKey
    """The queue entry's key: the job's own, or `ns/<job>+<first replica>` for a scale-up."""
    uid: str
    job_uid: str
    """uid of the TrainingJob the gang serves."""
    name: str
    """Name of that TrainingJob (pods and claims are `<name>-<replica>`)."""
    job: Mapping[str, Any] | None
    placement: tuple[model.ReplicaPlacement, ...]
    admitted_at: str
    """The admission's timestamp: it names this attempt in the ending annotation."""
    is_running: bool
    is_evicting: bool
    pods: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    claims: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    ending: Ending | None = None
    reason: str = ""
    failure: str = ""
    """Metric label of a start failure: timeout, pod_failed, node_lost or other."""
    replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    """Cluster facts `assess` needs besides the gang."""

    now: float
    long_running: bool
    startup_timeout_s: float
    admitted_at_s: float
    restarts: int
    max_restarts: int
    unready_nodes: frozenset[str] = frozenset()
    evicting_devices: frozenset[str] = frozenset()
    is_scaled_away: bool = False
    """The job's replicas were lowered below this scale-up gang's replicas."""


def is_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == objects.GATE for g in gates)


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ending_annotation(gang: Gang) -> str:
    """One annotation per queue entry of the job, so two gangs ending at once never clash."""
    _, separator, first = gang.key.partition("/")[2].partition("+")
    return f"{ENDING_ANNOTATION}-{first}" if separator else ENDING_ANNOTATION


def recorded_ending(gang: Gang) -> Verdict | None:
    """The ending written on the job for this admission, if teardown already started."""
    annotations = ((gang.job or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(ending_annotation(gang))
    if not raw:
        return None
    try:
        stored = json.loads(raw)
        if stored.get("admittedAt") != gang.admitted_at:
            return None
        return Verdict(
            Action.TEARDOWN,
            ending=Ending(stored["ending"]),
            reason=str(stored.get("reason", "")),
            failure=str(stored.get("failure", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _claim_problem(gang: Gang, *, released: bool) -> str | None:
    """An allocation that differs from the reservation, or one cleared or deleted after the
    release: something other than gangq changed it, an incident to repair (issue 6, item 3)."""
    job_name = gang.name
    for placement in gang.placement:
        name = objects.replica_name(job_name, placement.replica)
        claim = gang.claims.get(placement.replica)
        if claim is None:
            if released:
                return f"claim {name} disappeared"
            continue
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            return f"claim {name} is being deleted"
        found = objects.allocated_devices(claim)
        if found is None:
            if released:
                return f"the allocation of claim {name} was cleared"
            continue
        if found != tuple(sorted(placement.devices)):
            return (
                f"claim {name} holds {', '.join(found)} instead of the reserved "
                f"{', '.join(sorted(placement.devices))}"
            )
    return None


def _lost(gang: Gang, context: Context) -> tuple[str, str] | None:
    """(failure label, reason) when the gang lost a node or a device under it (rule 8)."""
    for placement in gang.placement:
        if placement.node in context.unready_nodes:
            return "node_lost", f"node {placement.node} of replica {placement.replica} is not ready"
        tainted = [d for d in placement.devices if d in context.evicting_devices]
        if tainted:
            return (
                "node_lost",
                f"device {tainted[0]} of replica {placement.replica} is tainted NoExecute",
            )
    return None


def _failure(gang: Gang, context: Context, *, reason: str, failure: str) -> Verdict:
    if context.restarts >= context.max_restarts and not context.long_running:
        return Verdict(
            Action.TEARDOWN,
            ending=Ending.FAILED,
            reason=f"{reason}; {context.restarts} restarts used of {context.max_restarts}",
            failure=failure,
        )
    return Verdict(Action.TEARDOWN, ending=Ending.REQUEUE, reason=reason, failure=failure)


def assess(gang: Gang, context: Context) -> Verdict:
    """The next step for the gang; the first rule that matches wins."""
    recorded = recorded_ending(gang)
    if recorded is not None:
        return recorded
    job_meta = (gang.job or {}).get("metadata") or {}
    if gang.job is None or job_meta.get("deletionTimestamp") or job_meta.get("uid") != gang.job_uid:
        return Verdict(Action.TEARDOWN, ending=Ending.DELETED, reason="TrainingJob deleted")
    if gang.is_evicting:
        return Verdict(Action.TEARDOWN, ending=Ending.PREEMPTED, reason="preempted")
    if context.is_scaled_away:
        return Verdict(Action.TEARDOWN, ending=Ending.SUCCEEDED, reason="scaled down")
    released = any(not is_gated(p) for p in gang.pods.values())
    problem = _claim_problem(gang, released=released)
    if problem is not None:
        return _failure(gang, context, reason=problem, failure="other")
    lost = _lost(gang, context)
    if lost is not None:
        return _failure(gang, context, reason=lost[1], failure=lost[0])
    replicas = [p.replica for p in gang.placement]
    if released:
        return _released(gang, context, replicas=replicas)
    if context.now > context.admitted_at_s + context.startup_timeout_s:
        return _timeout(gang, context)
    return Verdict(Action.BUILD)


def _timeout(gang: Gang, context: Context) -> Verdict:
    return _failure(
        gang,
        context,
        reason=f"not Ready within startupTimeoutSeconds={context.startup_timeout_s:.0f}",
        failure="timeout",
    )


def _released(gang: Gang, context: Context, *, replicas: list[int]) -> Verdict:
    pods = [gang.pods.get(r) for r in replicas]
    if not context.long_running and all(p is not None and phase(p) == "Succeeded" for p in pods):
        return Verdict(Action.TEARDOWN, ending=Ending.SUCCEEDED, reason="all replicas succeeded")
    # A long-running replica never finishes by itself: an exit of any kind is a failure.
    ended = ("Failed", "Succeeded") if context.long_running else ("Failed",)
    broken = tuple(
        r
        for r, p in zip(replicas, pods, strict=True)
        if p is None or phase(p) in ended or (p.get("metadata") or {}).get("deletionTimestamp")
    )
    if broken and context.long_running and gang.is_running:
        return Verdict(Action.RESTART_IN_PLACE, reason="pod failed", replicas=broken)
    if broken:
        return _failure(
            gang, context, reason=f"replica {broken[0]} failed or was lost", failure="pod_failed"
        )
    if any(p is not None and is_gated(p) for p in pods):
        return Verdict(Action.BUILD)
    if not gang.is_running:
        if all(p is not None and is_ready(p) for p in pods):
            return Verdict(Action.MARK_RUNNING)
        if context.now > context.admitted_at_s + context.startup_timeout_s:
            return _timeout(gang, context)
    return Verdict(Action.WAIT)
