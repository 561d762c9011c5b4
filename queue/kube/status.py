"""What a TrainingJob's status and Kubernetes Events say, from the store's record of the job.

Owns the status document (phase, queuePosition, reason, placement, size, times, restarts,
preemptions, releaseSkewMs, conditions) and Event bodies. Pure: the reconciler sends them and
only when they differ from what the cluster already shows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gangq.queue.core import model
from gangq.queue.kube import objects, trainingjob
from gangq.queue.store import jobs, reservations

CHECKPOINT_REQUESTED = "CheckpointRequested"
"""Condition and Event reason of a victim asked for a checkpoint before its eviction."""
COMPARED = ("phase", "queuePosition", "reason", "placement", "size", "restarts", "preemptions")
CAUSE_REASONS = {"Error": "ReplicaFailed", "Lost": "ReplicaLost", "": "Ended"}
"""Replica causes renamed for the job's conditions; the others (OOMKilled, NodeLost,
StartupTimeout, MaxRuntimeExceeded...) read the same for the job."""


def condition_reason(cause: str) -> str:
    """A CamelCase condition and event reason for how a job ended (Kubernetes conventions)."""
    named = CAUSE_REASONS.get(cause, cause)
    return "".join(ch for ch in named if ch.isalnum()) or "Ended"


def checkpoint_request(
    requested_at: float, evict_by: float, *, preemptor: str | None, shrink_to: int | None = None
) -> str:
    """What a victim asked for a checkpoint is told: when, for whom, and its last moment,
    evicted then or, for a gang that shrinks (rule 13), shrunk to `shrink_to` replicas."""
    wanted = f" for {preemptor}" if preemptor else ""
    then = "evicting" if shrink_to is None else f"shrinking to {shrink_to} replicas"
    return (
        f"checkpoint requested at {objects.rfc3339(requested_at)}{wanted}, "
        f"{then} by {objects.rfc3339(evict_by)}"
    )


def waiting_reason(record: jobs.JobRecord) -> str:
    """`Quota`, `Capacity`, `Backfill`...: the CamelCase reason of a queued job's wait."""
    if record.reason is None:
        return "Queued"
    return "".join(part.capitalize() for part in str(record.reason.code).split("_"))


def _stamp(unix_s: float | None) -> str | None:
    return None if unix_s is None else objects.rfc3339(unix_s)


def _placement(placement: tuple[model.ReplicaPlacement, ...]) -> list[dict[str, Any]]:
    out = []
    for replica in placement:
        devices = []
        for device in replica.devices:
            driver, pool, name = reservations.split_device_id(device)
            devices.append({"driver": driver, "pool": pool, "device": name})
        out.append({"replica": replica.replica, "node": replica.node, "devices": devices})
    return out


def _condition(kind: str, state: bool, reason: str, message: str, *, now: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if state else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a valid TrainingJob is not queued yet: its name is still held by an earlier job of
    the same name that has not ended (a job refused for its spec has a record instead)."""

    message: str


def size(placement: tuple[model.ReplicaPlacement, ...], *, replicas: int) -> str:
    """`status.size`, `3/4`: the replicas holding devices of the most the job runs at (rule
    13: an elastic job may start below `spec.replicas`), one string for `kubectl get`."""
    return f"{len(placement)}/{replicas}"


def desired(
    record: jobs.JobRecord | None,
    *,
    placement: tuple[model.ReplicaPlacement, ...],
    replicas: int,
    problem: Refusal | None,
    now: str,
) -> dict[str, Any]:
    """The status gangq wants shown; `problem` is why the job was refused at the edge (it has
    no record then). A job neither queued nor refused yet gets no status at all. `replicas`
    is the job's `spec.replicas`, the most it runs at."""
    if record is None:
        assert problem is not None, "a job that is neither queued nor refused has no status"
        return {
            "phase": "Queued",
            "reason": problem.message,
            "conditions": [_condition("Admissible", False, "NameInUse", problem.message, now=now)],
        }
    reason = record.reason.message if record.reason else ""
    code = str(record.reason.code) if record.reason else ""
    invalid = code == "invalid"
    never_fits = code == "unschedulable"
    holding = record.phase in ("Admitted", "Running")
    finished = record.phase in ("Succeeded", "Failed")
    if finished and record.outcome is not None:
        reason = record.outcome.message
    conditions = [
        _condition(
            "Admissible",
            not invalid,
            trainingjob.INVALID_SPEC if invalid else "Valid",
            reason if invalid else "",
            now=now,
        ),
        _condition(
            "Admitted",
            holding,
            record.phase if holding or finished else waiting_reason(record),
            "" if finished else reason,
            now=now,
        ),
        _condition("Ready", record.phase == "Running", record.phase, "", now=now),
        # rule 10: a job the cluster as configured can never run is told apart from a wait
        _condition(
            "Schedulable",
            not never_fits,
            "NeverFits" if never_fits else "Fits",
            reason if never_fits else "",
            now=now,
        ),
    ]
    if holding and record.checkpoint_requested_at is not None and record.evict_by is not None:
        reason = checkpoint_request(
            record.checkpoint_requested_at,
            record.evict_by,
            preemptor=record.evicted_for,
            shrink_to=record.shrink_to,
        )
        why = "Preempting" if record.shrink_to is None else "Shrinking"
        conditions.append(_condition(CHECKPOINT_REQUESTED, True, why, reason, now=now))
    if finished:
        outcome = record.outcome.cause if record.outcome else ""
        cause = trainingjob.INVALID_SPEC if invalid else outcome
        conditions.append(_condition(record.phase, True, cause or record.phase, reason, now=now))
    status: dict[str, Any] = {
        "phase": record.phase,
        "queuePosition": record.position,
        "reason": reason,
        "placement": _placement(placement) if holding else [],
        "size": size(placement, replicas=replicas) if holding else None,
        "restarts": record.restarts,
        "preemptions": record.preemptions,
        "admittedAt": _stamp(record.admitted_at),
        "startedAt": _stamp(record.started_at),
        "finishedAt": _stamp(record.finished_at),
        "estimatedStartTime": _stamp(record.reserved_start_at)
        if record.phase == "Queued"
        else None,
        "conditions": conditions,
    }
    return status


def differs(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """True when a compared field or a condition's status or message changed."""
    if any(current.get(k) != wanted.get(k) for k in COMPARED if k in wanted):
        return True
    old = {
        c.get("type"): (c.get("status"), c.get("message")) for c in current.get("conditions") or []
    }
    new = {c["type"]: (c["status"], c["message"]) for c in wanted.get("conditions") or []}
    return old != new


def wait_kind(status: Mapping[str, Any]) -> str | None:
    """The kind of wait a status shows for a queued job (its Admitted condition's reason:
    `Capacity`, `Quota`...; "" without one); None when the job is not queued."""
    if status.get("phase") != "Queued":
        return None
    found = [c for c in status.get("conditions") or [] if c.get("type") == "Admitted"]
    return str(found[0].get("reason") or "") if found else ""


def new_wait(
    current: Mapping[str, Any], wanted: Mapping[str, Any], *, told: Collection[str] = ()
) -> tuple[str, str] | None:
    """(reason, message) when `wanted` shows a queued job waiting for a new kind of reason,
    one not `told` during this wait already: a wait that swings between two kinds (capacity,
    then a backfill reservation ahead, then capacity again) is told once per kind."""
    if wanted.get("phase") != "Queued" or not wanted.get("reason"):
        return None
    kind = wait_kind(wanted) or ""
    if kind == wait_kind(current) or kind in told:
        return None
    return kind or "Queued", str(wanted["reason"])


def only_queue_moved(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """True when a job stays Queued and just its position or reason changed: churn that every
    cycle makes for every waiting job, so it is shown at a bounded rate."""
    return current.get("phase") == wanted.get("phase") == "Queued" and all(
        current.get(k) == wanted.get(k)
        for k in COMPARED
        if k in wanted and k not in ("queuePosition", "reason")
    )


def merged_conditions(current: Mapping[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """Keep lastTransitionTime of conditions whose status did not change."""
    old = {c.get("type"): c for c in current.get("conditions") or []}
    for condition in wanted.get("conditions") or []:
        previous = old.get(condition["type"])
        if (
            previous
            and previous.get("status") == condition["status"]
            and previous.get("lastTransitionTime")
        ):
            condition["lastTransitionTime"] = previous["lastTransitionTime"]
    return wanted


def event(
    job: Mapping[str, Any], *, reason: str, message: str, warning: bool, now: str
) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "gangq.dev/v1alpha1",
            "kind": "TrainingJob",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "gangq"},
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
    }
