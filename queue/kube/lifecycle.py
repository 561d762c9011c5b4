"""What a gang holding devices needs next, read from its TrainingJob, pods, claims and nodes.

Owns the lifecycle rules of PRODUCT rule 8 and §5 as one pure function, `assess`: released or
not, Ready, succeeded, failed (a failed or lost pod, a NotReady node, a NoExecute device taint,
an allocation gangq did not write), startup timeout, deletion, eviction; and the words of each
failure, which name the node and why it was lost: its Ready condition, the NoExecute taint that
evicted a pod (the pod's `DisruptionTarget` condition says only that the taint manager deleted
it, so the taint is read from the node), a node that no longer exists. It performs no I/O; the
actuator carries the verdict out.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.core import fit, model
from gangq.queue.core.device import NO_EXECUTE
from gangq.queue.core.inventory import tolerations_of
from gangq.queue.kube import objects, podgroups

TERMINATED = ("Succeeded", "Failed")


class Action(enum.StrEnum):
    BUILD = "build"
    """Create what is missing (Service, claims with allocation, gated pods); release when whole."""
    WAIT = "wait"
    MARK_RUNNING = "mark_running"
    REQUEST_CHECKPOINT = "request_checkpoint"
    """A victim that opted in is asked for a checkpoint and keeps running until it reports
    one or its grace ends (rule 6); its devices stay reserved to it meanwhile."""
    RESTART_IN_PLACE = "restart_in_place"
    TEARDOWN = "teardown"
    SHRINK = "shrink"
    """An elastic gang chosen to shrink (rule 13): its replicas from `Gang.shrink_to` on are
    torn down, pods first, then their devices released; the others run on, never requeued."""
    ANNOUNCE_SIZE = "announce_size"
    """Pods of `Verdict.replicas` show another size than the gang's, or a checkpoint request
    no eviction stands behind (a shrink done): their annotations are brought up to date."""
    GROW = "grow"
    """Create what the replicas a grow adds are missing (claims with allocation, gated pods);
    release them together once all exist. The running replicas are left alone."""
    GROWN = "grown"
    """Every added replica is Ready: the grow ends in the store; the pods that show the old
    size are told the new one afterwards (ANNOUNCE_SIZE)."""
    UNDO_GROW = "undo_grow"
    """The added replicas did not all come up: their pods, then their claims, go and their
    devices are released; the gang keeps running at the size it grew from."""


class Ending(enum.StrEnum):
    REQUEUE = "requeue"
    PREEMPTED = "preempted"
    REFUSED = "refused"
    """The API server refused a write of gangq's own: the job is queued again after a pause,
    its reason naming the controller's problem; neither a restart nor a preemption."""
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class Growth:
    """A grow under way (rule 13): the gang's replicas from `from_size` on are being added."""

    from_size: int
    started_at_s: float
    """When the grow was decided: its added replicas must be Ready within the job's
    startup timeout from here."""


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
    """This attempt's pods by replica."""
    claims: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    stale_pods: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    """Pods an earlier attempt left (kept for their logs): deleted before this one's start."""
    shrink_to: int | None = None
    """An evicting gang that shrinks instead (rule 13): the replicas it keeps."""
    growing: Growth | None = None
    """The grow under way; None when the gang is not growing."""
    pod_groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The gang's PodGroups by name (empty without PodGroups)."""

    @property
    def size(self) -> int:
        """The replicas the job runs at with this gang: its replicas are the highest numbers
        below it (a job's own gang 0..size-1, an elastic job's possibly fewer than
        `spec.replicas`; a scale-up gang the ones up to the job's new count)."""
        return max((p.replica for p in self.placement), default=-1) + 1


@dataclass(frozen=True, slots=True)
class ReplicaFailure:
    """What happened to one replica of a failed attempt, for the history and the reason."""

    replica: int
    node: str
    cause: str
    """CamelCase: Error, OOMKilled, NodeLost, NodeTainted, Evicted, StartupTimeout,
    MaxRuntimeExceeded, Lost."""
    exit_code: int | None = None
    message: str = ""
    """The container's termination message, if it left one."""

    def describe(self) -> str:
        where = f"replica {self.replica} on {self.node}" if self.node else f"replica {self.replica}"
        if self.exit_code is not None:
            return f"{where} exited with code {self.exit_code} ({self.cause})"
        said = self.message or CAUSES.get(self.cause, self.cause)
        return f"{where} was evicted: {said}" if self.cause in EVICTIONS else f"{where}: {said}"

    def details(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "node": self.node,
            "reason": self.cause,
            "exitCode": self.exit_code,
            "message": self.message,
        }


CLAIM_CHANGED = "ClaimChanged"
"""Cause of a replica whose claim is gone or holds other devices than reserved."""
CAUSES = {
    "NodeLost": "its node was lost",
    "NodeTainted": "its node was tainted NoExecute",
    "Evicted": "its pod was deleted by a controller",
    "StartupTimeout": "not Ready in time",
    "MaxRuntimeExceeded": "ran past maxRuntimeSeconds",
    "Lost": "its pod disappeared",
    "DeviceTainted": "a device was tainted NoExecute",
    "Unschedulable": "kube-scheduler could not bind its pod group",
    CLAIM_CHANGED: "its claim was changed by someone else",
}
EVICTIONS = frozenset({"NodeTainted", "Evicted"})
"""Causes told as `replica N on NODE was evicted: why`."""
NODE_CAUSES = frozenset({"NodeLost", "NodeTainted", "Evicted"})
"""Causes that are not the job's doing but its node's: the node was lost, or a controller took
the pod off it (a taint, a drain through the Eviction API). Counted as `node_lost` start
failures, never as a run to its own end, and never restarted in place."""
WORDED_FROM_THE_NODE = frozenset({"Lost", *NODE_CAUSES})
"""Causes whose words depend on the node's state: worth reading the node afresh first."""
TAINT_MANAGER = "DeletionByTaintManager"
"""`DisruptionTarget` reason of a pod kube-controller-manager's taint eviction controller
deletes for its node's NoExecute taint (pkg/controller/tainteviction)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    ending: Ending | None = None
    reason: str = ""
    failure: str = ""
    """Metric label of a start failure: timeout, pod_failed, node_lost or other."""
    replicas: tuple[int, ...] = ()
    cause: str = ""
    """CamelCase reason of the ending, shown in the job's conditions and events."""
    failures: tuple[ReplicaFailure, ...] = ()
    backoff_s: float = 0.0
    """How long a job ending REFUSED waits before it may be admitted again."""
    lost_device_s: float | None = None
    """Work the eviction of a victim asked for a checkpoint first destroys, known only at
    its eviction, or the work a shrink destroys; None for every other verdict."""


@dataclass(frozen=True, slots=True)
class Context:
    """Cluster facts `assess` needs besides the gang."""

    now: float
    long_running: bool
    startup_timeout_s: float
    admitted_at_s: float
    restarts: int
    max_restarts: int
    nodes: Mapping[model.NodeName, model.Node] = field(default_factory=dict)
    """The inventory's nodes (readiness, why not Ready, taints); those of failed replicas
    read afresh from the API server before a failure is worded."""
    evicting_devices: frozenset[str] = frozenset()
    is_scaled_away: bool = False
    """The job's replicas were lowered below this scale-up gang's replicas."""
    started_at_s: float | None = None
    max_runtime_s: float | None = None
    checkpoint_requested_at_s: float | None = None
    """An evicting gang that opted in: when gangq asked it for a checkpoint."""
    evict_by_s: float | None = None
    """When its grace ends."""
    last_checkpoint_at_s: float | None = None
    """The latest checkpoint the job reported (annotation or store, the later)."""
    bind_timeout_s: float = math.inf
    """How long a released gang's PodGroup may stay unschedulable (`pod_group_bind_timeout_s`)."""


def is_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == objects.GATE for g in gates)


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_terminated(pod: Mapping[str, Any]) -> bool:
    return phase(pod) in TERMINATED


def _termination(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first container's terminated state (exit code, reason, message), if it ended."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return {}


def _node_of(gang: Gang, replica: int) -> str:
    return next((p.node for p in gang.placement if p.replica == replica), "")


def pod_failure(
    gang: Gang, replica: int, pod: Mapping[str, Any] | None, context: Context
) -> ReplicaFailure:
    """How a replica's pod failed, from its container's terminated state."""
    node = _node_of(gang, replica)
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return _gone(replica, node, pod, context)
    state = _termination(pod)
    code = state.get("exitCode")
    cause = str(state.get("reason") or (pod.get("status") or {}).get("reason") or "Error")
    return ReplicaFailure(
        replica,
        node,
        cause,
        exit_code=int(code) if isinstance(code, int) else None,
        message=str(state.get("message") or "")[:512],
    )


def _disruption(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The `DisruptionTarget` condition a controller sets before it deletes a pod."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next(
        (
            c
            for c in conditions
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )


def _gone(
    replica: int, node_name: str, pod: Mapping[str, Any] | None, context: Context
) -> ReplicaFailure:
    """A replica whose pod is being deleted or is gone: why, from what the deleting controller
    wrote on the pod (`DisruptionTarget`) and from its node (`Context.nodes`)."""
    node = context.nodes.get(model.NodeName(node_name))
    disruption = _disruption(pod)
    no_execute = () if node is None else tuple(t for t in node.taints if t.effect == NO_EXECUTE)
    evicted_by_taint = disruption is not None and disruption.get("reason") == TAINT_MANAGER
    if evicted_by_taint or (pod is None and no_execute):
        tolerations = tolerations_of((pod or {}).get("spec") or {})
        # A taint tolerated for a while (tolerationSeconds) evicts too, once that has passed.
        named = fit.untolerated(no_execute, tolerations) or no_execute
        if named:
            taints = ", ".join(str(t) for t in named)
            message = f"node {node_name} tainted {taints}"
        else:
            message = str((disruption or {}).get("message") or "")
        return ReplicaFailure(replica, node_name, "NodeTainted", message=message)
    if node is None and node_name:
        message = f"node {node_name} no longer exists"
        return ReplicaFailure(replica, node_name, "NodeLost", message=message)
    if disruption is not None:
        message = f"{disruption.get('message') or ''} ({disruption.get('reason')})".lstrip()
        return ReplicaFailure(replica, node_name, "Evicted", message=message)
    message = "its pod was deleted" if pod is not None else ""
    return ReplicaFailure(replica, node_name, "Lost", message=message)


def _claim_problem(gang: Gang, *, released: bool) -> ReplicaFailure | None:
    """An allocation that differs from the reservation, or one cleared or deleted after the
    release: something other than gangq changed it, an incident to repair (issue 6, item 3)."""
    for placement in gang.placement:
        name = objects.replica_name(gang.name, placement.replica)
        claim = gang.claims.get(placement.replica)
        problem = None
        if claim is None:
            problem = f"claim {name} disappeared" if released else None
        elif (claim.get("metadata") or {}).get("deletionTimestamp"):
            problem = f"claim {name} is being deleted"
        else:
            found = objects.allocated_devices(claim)
            if found is None:
                problem = f"the allocation of claim {name} was cleared" if released else None
            elif found != tuple(sorted(placement.devices)):
                problem = (
                    f"claim {name} holds {', '.join(found)} instead of the reserved "
                    f"{', '.join(sorted(placement.devices))}"
                )
            elif objects.allocated_shares(claim) != {
                s.device: s.share_id for s in placement.shares
            }:
                problem = f"claim {name} holds other shares than the reserved ones"
        if problem is not None:
            return ReplicaFailure(placement.replica, placement.node, CLAIM_CHANGED, message=problem)
    return None


def _lost(gang: Gang, context: Context) -> ReplicaFailure | None:
    """The first replica whose node or device was lost under it (rule 8)."""
    for placement in gang.placement:
        node = context.nodes.get(placement.node)
        if node is not None and not node.ready:
            message = f"node {node.name} is NotReady ({node.unready_reason})"
            return ReplicaFailure(placement.replica, placement.node, "NodeLost", message=message)
        tainted = [d for d in placement.devices if d in context.evicting_devices]
        if tainted:
            message = f"device {tainted[0]} is tainted NoExecute"
            return ReplicaFailure(
                placement.replica, placement.node, "DeviceTainted", message=message
            )
    return None


def _failure(context: Context, failures: tuple[ReplicaFailure, ...], *, failure: str) -> Verdict:
    """Requeue for another attempt while restarts are left, else fail for good (rule 8)."""
    first = failures[0]
    if context.restarts >= context.max_restarts and not context.long_running:
        used = f"{context.restarts} of {context.max_restarts} restarts used"
        return Verdict(
            Action.TEARDOWN,
            ending=Ending.FAILED,
            reason=f"{first.describe()}; {used}",
            failure=failure,
            cause=first.cause,
            failures=failures,
        )
    return Verdict(
        Action.TEARDOWN,
        ending=Ending.REQUEUE,
        reason=f"{first.describe()}; restart {context.restarts + 1} of {context.max_restarts}",
        failure=failure,
        cause=first.cause,
        failures=failures,
    )


def _overrun(gang: Gang, context: Context) -> Verdict | None:
    """A job past `maxRuntimeSeconds` is stopped and fails for good (rule 5: the hard bound)."""
    limit, started = context.max_runtime_s, context.started_at_s
    if context.long_running or limit is None or started is None or context.now <= started + limit:
        return None
    message = f"ran past maxRuntimeSeconds={limit:.0f}"
    failures = tuple(
        ReplicaFailure(p.replica, p.node, "MaxRuntimeExceeded", message=message)
        for p in gang.placement
    )
    return Verdict(
        Action.TEARDOWN,
        ending=Ending.FAILED,
        reason=f"stopped: {message}",
        failure="other",
        cause="MaxRuntimeExceeded",
        failures=failures,
    )


def assess(gang: Gang, context: Context) -> Verdict:
    """The next step for the gang; the first rule that matches wins.

    Kept pods decide before claims do: after a restart in the middle of a teardown (claims
    already deleted), a gang whose pods all succeeded still ends Succeeded, and a failed pod
    is still the reason.
    """
    job_meta = (gang.job or {}).get("metadata") or {}
    if gang.job is None or job_meta.get("deletionTimestamp") or job_meta.get("uid") != gang.job_uid:
        return Verdict(
            Action.TEARDOWN, ending=Ending.DELETED, reason="TrainingJob deleted", cause="Deleted"
        )
    if gang.is_evicting:
        if gang.shrink_to is not None:
            return _shrinking(gang, context, keep=gang.shrink_to)
        return _evicting(gang, context)
    if context.is_scaled_away:
        return Verdict(
            Action.TEARDOWN, ending=Ending.SUCCEEDED, reason="scaled down", cause="ScaledDown"
        )
    if gang.growing is not None:
        return _growing(gang, gang.growing, context)
    replicas = [p.replica for p in gang.placement]
    pods = [gang.pods.get(r) for r in replicas]
    # A gang that ran was released, even when none of its pods is left to show it (a taint
    # eviction of a one-replica gang): rebuilding it would pin a new pod to the lost node.
    released = gang.is_running or any(not is_gated(p) for p in gang.pods.values())
    if released and not context.long_running:
        if all(p is not None and phase(p) == "Succeeded" for p in pods):
            reason = f"all {len(replicas)} replicas succeeded"
            return Verdict(
                Action.TEARDOWN, ending=Ending.SUCCEEDED, reason=reason, cause="Succeeded"
            )
        failed = tuple(
            pod_failure(gang, r, p, context)
            for r, p in zip(replicas, pods, strict=True)
            if p is not None and phase(p) == "Failed"
        )
        if failed:
            return _failure(context, failed, failure="pod_failed")
    overrun = _overrun(gang, context)
    if overrun is not None:
        return overrun
    problem = _claim_problem(gang, released=released)
    if problem is not None:
        return _failure(context, (problem,), failure="other")
    lost = _lost(gang, context)
    if lost is not None:
        return _failure(context, (lost,), failure="node_lost")
    if released:
        return _released(gang, context, replicas=replicas)
    if context.now > context.admitted_at_s + context.startup_timeout_s:
        return _timeout(gang, context)
    return Verdict(Action.BUILD)


def is_answered(context: Context) -> bool:
    """The job reported a checkpoint at or after the request: the request's second is what
    its pods read (whole seconds, as the API server writes times), so a checkpoint stamped
    in that second answers it."""
    requested, checkpoint = context.checkpoint_requested_at_s, context.last_checkpoint_at_s
    return requested is not None and checkpoint is not None and checkpoint >= math.floor(requested)


def _evicting(gang: Gang, context: Context) -> Verdict:
    """A victim is evicted at once, unless it opted in to be asked first, runs, and neither
    answered nor ran out of grace: then it is asked (again, harmlessly) and keeps running.
    Evicted after a request, it loses the work since its last checkpoint, counted now."""
    requested, deadline = context.checkpoint_requested_at_s, context.evict_by_s
    if requested is None or deadline is None:
        return Verdict(
            Action.TEARDOWN, ending=Ending.PREEMPTED, reason="preempted", cause="Preempted"
        )
    answered = is_answered(context)
    if gang.is_running and not answered and context.now < deadline:
        return Verdict(Action.REQUEST_CHECKPOINT, reason="checkpoint requested")
    if answered:
        reason = "preempted after the checkpoint it was asked for"
    elif gang.is_running:
        reason = f"preempted: no checkpoint within {deadline - requested:.0f}s of the request"
    else:
        reason = "preempted before it started"
    return Verdict(
        Action.TEARDOWN,
        ending=Ending.PREEMPTED,
        reason=reason,
        cause="Preempted",
        lost_device_s=_unsaved_device_s(gang, context),
    )


def _unsaved_device_s(gang: Gang, context: Context) -> float:
    """The work an eviction or a shrink destroys now: every device of the gang times the
    time since its last checkpoint (since its start without one), as the whole gang goes
    back to that checkpoint."""
    started = context.started_at_s if context.started_at_s is not None else context.now
    since = max(started, context.last_checkpoint_at_s or started)
    devices = sum(len(p.devices) for p in gang.placement)
    return devices * max(context.now - since, 0.0)


def _shrinking(gang: Gang, context: Context, *, keep: int) -> Verdict:
    """A shrink is driven as an eviction up to its checkpoint request, then the leaving
    replicas go and the others run on. The replicas it keeps follow every rule of a gang that
    is not evicting: when their verdict ends the gang (a failed pod, a lost node, a timeout,
    all done), that wins and the whole gang goes. The whole gang re-forms from its last
    checkpoint, so its work since then is lost on every device, not only the leaving ones."""
    kept = dataclasses.replace(
        gang,
        placement=tuple(p for p in gang.placement if p.replica < keep),
        is_evicting=False,
        shrink_to=None,
        pods={r: pod for r, pod in gang.pods.items() if r < keep},
        claims={r: claim for r, claim in gang.claims.items() if r < keep},
    )
    ending = assess(kept, context)
    if ending.action is Action.TEARDOWN:
        return ending
    requested, deadline = context.checkpoint_requested_at_s, context.evict_by_s
    answered, grace = is_answered(context), None
    if requested is not None and deadline is not None:
        if gang.is_running and not answered and context.now < deadline:
            return Verdict(Action.REQUEST_CHECKPOINT, reason="checkpoint requested")
        grace = deadline - requested
    reason = f"shrunk from {gang.size} to {keep} replicas"
    if not gang.is_running:
        reason += " before it started"
    elif answered:
        reason += " after the checkpoint it was asked for"
    elif grace is not None:
        reason += f": no checkpoint within {grace:.0f}s of the request"
    return Verdict(Action.SHRINK, reason=reason, lost_device_s=_unsaved_device_s(gang, context))


def _untold(gang: Gang, pods: list[Mapping[str, Any] | None]) -> tuple[int, ...]:
    """Replicas whose live pod does not show the gang's size, or still shows a checkpoint
    request (only an evicting gang is asked for one)."""
    size = str(gang.size)
    found = []
    for placement, pod in zip(gang.placement, pods, strict=True):
        if pod is None or is_terminated(pod):
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(objects.SIZE) != size or objects.CHECKPOINT_REQUESTED in annotations:
            found.append(placement.replica)
    return tuple(found)


def _timeout(gang: Gang, context: Context) -> Verdict:
    message = f"not Ready within startupTimeoutSeconds={context.startup_timeout_s:.0f}"
    late = tuple(
        ReplicaFailure(p.replica, p.node, "StartupTimeout", message=message)
        for p in gang.placement
        if not (gang.pods.get(p.replica) and is_ready(gang.pods[p.replica]))
    )
    return _failure(
        context,
        late or (ReplicaFailure(gang.placement[0].replica, "", "StartupTimeout", message=message),),
        failure="timeout",
    )


def _released(gang: Gang, context: Context, *, replicas: list[int]) -> Verdict:
    pods = [gang.pods.get(r) for r in replicas]
    # A long-running replica never finishes by itself: an exit of any kind is a failure.
    ended = ("Failed", "Succeeded") if context.long_running else ("Failed",)
    broken = tuple(
        r
        for r, p in zip(replicas, pods, strict=True)
        if p is None or phase(p) in ended or (p.get("metadata") or {}).get("deletionTimestamp")
    )
    if broken:
        failures = tuple(pod_failure(gang, r, gang.pods.get(r), context) for r in broken)
        lost = any(f.cause in NODE_CAUSES for f in failures)
        if context.long_running and gang.is_running and not lost:
            # Its failures go with it so that the node is read afresh before pods that a
            # node's taint evicted are made again on that node.
            return Verdict(
                Action.RESTART_IN_PLACE, reason="pod failed", replicas=broken, failures=failures
            )
        return _failure(context, failures, failure="node_lost" if lost else "pod_failed")
    if any(p is not None and is_gated(p) for p in pods):
        return Verdict(Action.BUILD)
    untold = _untold(gang, pods)
    if untold:
        return Verdict(Action.ANNOUNCE_SIZE, reason="size announced", replicas=untold)
    if not gang.is_running:
        if all(p is not None and is_ready(p) for p in pods):
            return Verdict(Action.MARK_RUNNING)
        unbound = _unbound(gang, context, pods)
        if unbound:
            return _failure(context, unbound, failure="timeout")
        if context.now > context.admitted_at_s + context.startup_timeout_s:
            return _timeout(gang, context)
    return Verdict(Action.WAIT)


def unbound_since(gang: Gang, pods: Iterable[Mapping[str, Any] | None]) -> float | None:
    """Since when kube-scheduler has called a PodGroup of these pods unschedulable, if one
    it still is."""
    named = {name for p in pods if p is not None and (name := objects.pod_group_of(p))}
    since = [
        at
        for name in named
        if (group := gang.pod_groups.get(name)) is not None
        and (at := podgroups.unschedulable_since(group)) is not None
    ]
    return min(since, default=None)


def _unbound(
    gang: Gang, context: Context, pods: list[Mapping[str, Any] | None]
) -> tuple[ReplicaFailure, ...]:
    """The replicas of a released gang whose PodGroup kube-scheduler has called
    unschedulable for longer than the bind timeout: it retries such a group with no backoff
    until its pods are gone, so the attempt is torn down (a node lost or tainted between
    placement and binding) rather than left until the startup timeout. Each replica is told
    what the scheduler told its pod."""
    since = unbound_since(gang, pods)
    if since is None or context.now - since <= context.bind_timeout_s:
        return ()
    waited = f"not bound by kube-scheduler within {context.bind_timeout_s:.0f} s"
    return tuple(
        ReplicaFailure(
            placement.replica,
            placement.node,
            "Unschedulable",
            message=f"{waited}: {_scheduler_said(pod) or 'pod group is unschedulable'}",
        )
        for placement, pod in zip(gang.placement, pods, strict=True)
        if pod is not None and not (pod.get("spec") or {}).get("nodeName")
    )


def _scheduler_said(pod: Mapping[str, Any]) -> str:
    found = objects.condition(pod, "PodScheduled") or {}
    return str(found.get("message") or "") if found.get("status") == "False" else ""


def _growing(gang: Gang, growth: Growth, context: Context) -> Verdict:
    """A growing gang: the replicas it ran with are judged as any running gang (a failure or
    its end there is the whole gang's, torn down with the added replicas); the added ones,
    whose pods may not exist yet, only decide the grow: built, released, done or undone."""
    running = dataclasses.replace(
        gang,
        placement=tuple(p for p in gang.placement if p.replica < growth.from_size),
        pods={r: pod for r, pod in gang.pods.items() if r < growth.from_size},
        claims={r: claim for r, claim in gang.claims.items() if r < growth.from_size},
        growing=None,
    )
    verdict = assess(running, context)
    if verdict.action is not Action.WAIT:
        return verdict
    return _adding(gang, growth, context)


def _added_failure(added: Gang, context: Context) -> ReplicaFailure | None:
    """An added replica whose pod failed or is being deleted by someone else; one whose pod
    is missing is only not built yet."""
    for placement in added.placement:
        pod = added.pods.get(placement.replica)
        if pod is None:
            continue
        if phase(pod) == "Failed" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return pod_failure(added, placement.replica, pod, context)
    return None


def _adding(gang: Gang, growth: Growth, context: Context) -> Verdict:
    """The added replicas: undone when one is lost, fails or is not Ready within the startup
    timeout of the grow; built while one misses its claim or pod or is gated; grown once
    all are Ready."""
    added = dataclasses.replace(
        gang, placement=tuple(p for p in gang.placement if p.replica >= growth.from_size)
    )
    problem = (
        _claim_problem(added, released=False)
        or _lost(added, context)
        or _added_failure(added, context)
    )
    pods = [gang.pods.get(p.replica) for p in added.placement]
    late = [p for p, pod in zip(added.placement, pods, strict=True) if not (pod and is_ready(pod))]
    if problem is None and late and context.now > growth.started_at_s + context.startup_timeout_s:
        message = f"not Ready within startupTimeoutSeconds={context.startup_timeout_s:.0f}"
        problem = ReplicaFailure(late[0].replica, late[0].node, "StartupTimeout", message=message)
    if problem is not None:
        return Verdict(
            Action.UNDO_GROW,
            reason=f"grow to {gang.size} failed: {problem.describe()}",
            cause=problem.cause,
            failures=(problem,),
        )
    if any(pod is None or is_gated(pod) for pod in pods):
        return Verdict(Action.GROW)
    return Verdict(Action.WAIT if late else Action.GROWN)
