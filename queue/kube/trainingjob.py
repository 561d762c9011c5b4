"""TrainingJob objects into queue entries: the validation edge for what users submit.

Owns reading a TrainingJob dict with pydantic (exact messages naming the field), the tenant of
its namespace and the translation into a core `PendingJob`. Whether the job can ever run (tier,
quota, device class, selectors, size) is the decision core's judgement, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gangq.queue.core import inventory, model, quantity
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import validation
from gangq.queue.store.models import FINISHED_PHASES

FINALIZER = "gangq.dev/teardown"
"""Kept on a TrainingJob until its pods and claims are gone and its devices released."""
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"
INVALID_SPEC = "InvalidSpec"
MAX_CHECKPOINT_GRACE_S = 3600
"""Longest `spec.preemption.checkpointGraceSeconds`: a preemptor waits no longer for a victim's
checkpoint than an hour, whatever the victim asks for."""
"""Reason of the Admissible condition, and of the Event, of a job refused for its spec."""


def shows_invalid(job: Mapping[str, Any]) -> bool:
    """The TrainingJob's status says it failed for its spec."""
    shown = job.get("status") or {}
    return shown.get("phase") == "Failed" and any(
        c.get("type") == "Admissible" and c.get("reason") == INVALID_SPEC
        for c in shown.get("conditions") or []
    )


def is_open(job: Mapping[str, Any]) -> bool:
    """Whether a leader step still has anything to do with the job: its status does not show
    an end yet, it is being deleted, it was refused for its spec (a fix queues it again) or it
    expires (`ttlSecondsAfterFinished`). The others are finished jobs kept for their history,
    which grow without bound and which no step needs to look at."""
    shown = job.get("status") or {}
    return (
        shown.get("phase") not in FINISHED_PHASES
        or bool((job.get("metadata") or {}).get("deletionTimestamp"))
        or isinstance((job.get("spec") or {}).get("ttlSecondsAfterFinished"), int)
        or shows_invalid(job)
    )


class Constraint(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    match_attribute: str = Field(alias="matchAttribute", min_length=1)


class CapacitySpec(BaseModel):
    """`capacity`: a share of each device, as in a ResourceClaim request (`capacity.requests`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    requests: dict[str, int | str] = Field(default_factory=dict, min_length=1, max_length=8)


class TopologySpec(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str = ""
    mode: Literal["Required", "Preferred", "None"] = "Preferred"


class PreemptionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    checkpoint_grace_seconds: int | None = Field(
        alias="checkpointGraceSeconds", default=None, ge=0, le=MAX_CHECKPOINT_GRACE_S
    )


class ElasticSpec(BaseModel):
    """`elastic`: the job may run at any size from `minReplicas` to `replicas` (rule 13)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    min_replicas: int = Field(alias="minReplicas", ge=1, le=validation.MAX_REPLICA_INDEX + 1)


class TrainingJobSpec(BaseModel):
    """`spec` of a TrainingJob (crds/trainingjob.yaml is the schema; this re-checks it)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    tier: str = Field(min_length=1)
    priority: int = Field(default=0, ge=-validation.PRIORITY_LIMIT, le=validation.PRIORITY_LIMIT)
    replicas: int = Field(ge=1, le=validation.MAX_REPLICA_INDEX + 1)
    devices_per_replica: int = Field(alias="devicesPerReplica", ge=1, le=validation.INT32_MAX)
    device_class_name: str = Field(alias="deviceClassName", default=DEFAULT_DEVICE_CLASS)
    selectors: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    capacity: CapacitySpec | None = None
    topology: TopologySpec | None = None
    startup_timeout_seconds: int = Field(
        alias="startupTimeoutSeconds", default=600, ge=1, le=validation.INT32_MAX
    )
    max_runtime_seconds: int | None = Field(
        alias="maxRuntimeSeconds", default=None, ge=1, le=validation.INT32_MAX
    )
    max_restarts: int = Field(alias="maxRestarts", default=3, ge=0, le=validation.INT32_MAX)
    ttl_seconds_after_finished: int | None = Field(
        alias="ttlSecondsAfterFinished", default=None, ge=0, le=31_536_000
    )
    checkpoint_interval_seconds: int | None = Field(
        alias="checkpointIntervalSeconds", default=None, ge=1, le=validation.INT32_MAX
    )
    restart_seconds: int = Field(
        alias="restartSeconds",
        default=int(model.DEFAULT_RESTART_S),
        ge=0,
        le=validation.INT32_MAX,
    )
    preemption: PreemptionSpec | None = None
    elastic: ElasticSpec | None = None
    template: dict[str, Any] = Field(default_factory=dict)


def key_of(job: dict[str, Any]) -> model.JobKey:
    metadata = job.get("metadata") or {}
    return model.JobKey(f"{metadata.get('namespace')}/{metadata.get('name')}")


def parse_spec(job: dict[str, Any]) -> TrainingJobSpec:
    """The spec, or an `InvalidInputError` listing every problem as `field: message`."""
    try:
        return TrainingJobSpec.model_validate(job.get("spec") or {})
    except ValidationError as error:
        problems = "; ".join(
            f"spec.{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise InvalidInputError(problems) from error


def submitted_at(job: dict[str, Any]) -> float:
    stamp = (job.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError as error:
        raise InvalidInputError(f"metadata.creationTimestamp {stamp!r}: {error}") from error


def pending_job(job: dict[str, Any], *, tenant: str | None) -> model.PendingJob:
    """The queue entry for `job`; raises `InvalidInputError` saying exactly what is wrong
    (every problem of the spec and the name at once, then a missing tenant)."""
    key = key_of(job)
    problems = validation.name_problems(str((job.get("metadata") or {}).get("name") or ""))
    try:
        spec = parse_spec(job)
    except InvalidInputError as error:
        problems.append(str(error))
    else:
        if spec.elastic is not None and spec.elastic.min_replicas > spec.replicas:
            problems.append(
                f"spec.elastic.minReplicas: {spec.elastic.min_replicas} is more than "
                f"spec.replicas {spec.replicas}, the most the job runs at"
            )
    if problems:
        raise InvalidInputError("; ".join(problems))
    if not tenant:
        namespace = (job.get("metadata") or {}).get("namespace")
        raise InvalidInputError(
            f"namespace {namespace} has no gangq.dev/tenant label: no tenant owns this job"
        )
    requests = capacity_requests(spec.capacity)
    topology = spec.topology or TopologySpec()
    mode = model.TopologyMode(topology.mode if topology.key else "None")
    return model.PendingJob(
        key=key,
        uid=str((job.get("metadata") or {}).get("uid") or ""),
        tenant=model.Tenant(tenant),
        tier=spec.tier,
        priority=spec.priority,
        replicas=spec.replicas,
        devices_per_replica=spec.devices_per_replica,
        device_class=spec.device_class_name,
        selectors=spec.selectors,
        constraints=tuple(c.match_attribute for c in spec.constraints),
        capacity_requests=requests,
        topology=model.Topology(key=topology.key, mode=mode),
        pod=inventory.pod_requirements(spec.template, owner=f"TrainingJob {key} template"),
        submitted_at=submitted_at(job),
        max_runtime_s=None if spec.max_runtime_seconds is None else float(spec.max_runtime_seconds),
        checkpoint_interval_s=(
            None
            if spec.checkpoint_interval_seconds is None
            else float(spec.checkpoint_interval_seconds)
        ),
        restart_s=float(spec.restart_seconds),
        checkpoint_grace_s=_grace(spec.preemption),
        min_replicas=None if spec.elastic is None else spec.elastic.min_replicas,
    )


def _grace(preemption: PreemptionSpec | None) -> float | None:
    if preemption is None or preemption.checkpoint_grace_seconds is None:
        return None
    return float(preemption.checkpoint_grace_seconds)


def capacity_requests(capacity: CapacitySpec | None) -> tuple[tuple[str, int], ...]:
    """`capacity.requests` in thousandths, sorted; a bad name or amount raises
    `InvalidInputError` naming the field."""
    if capacity is None:
        return ()
    problems, requests = [], []
    for name, value in sorted(capacity.requests.items()):
        field = f"spec.capacity.requests.{name}"
        if not validation.is_capacity_name(name):
            problems.append(
                f"{field}: a capacity name is a C identifier, optionally prefixed by a DNS "
                "subdomain and '/' (e.g. memory or gpu.nvidia.com/memory)"
            )
            continue
        try:
            amount = quantity.parse_milli(value)
        except InvalidInputError as error:
            problems.append(f"{field}: {error}")
            continue
        if amount <= 0:
            problems.append(f"{field}: {value!r} must be more than zero")
            continue
        requests.append((name, amount))
    if problems:
        raise InvalidInputError("; ".join(problems))
    return tuple(requests)


def _bounded(value: object, *, default: int, low: int, high: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return default


def summary(job: dict[str, Any], *, tenant: str | None) -> model.PendingJob:
    """What can be read of a job refused for its spec, for the record the API shows: a field
    that cannot be read or stored takes a neutral value (the reason names the real one)."""
    raw = job.get("spec")
    spec = raw if isinstance(raw, dict) else {}
    limit = validation.INT32_MAX
    try:
        submitted = submitted_at(job)
    except InvalidInputError:
        submitted = 0.0
    return model.PendingJob(
        key=key_of(job),
        uid=str((job.get("metadata") or {}).get("uid") or ""),
        tenant=model.Tenant(tenant or ""),
        tier=str(spec.get("tier") or ""),
        priority=_bounded(spec.get("priority"), default=0, low=-limit, high=limit),
        replicas=_bounded(spec.get("replicas"), default=1, low=1, high=limit),
        devices_per_replica=_bounded(spec.get("devicesPerReplica"), default=1, low=1, high=limit),
        device_class=str(spec.get("deviceClassName") or DEFAULT_DEVICE_CLASS),
        submitted_at=submitted,
    )
