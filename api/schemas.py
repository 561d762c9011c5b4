"""The JSON shapes of the REST API: `…In` models validate what callers send, `…Out` what they get.

Owns field names (camelCase on the wire, as in the TrainingJob CRD), limits on input and the
conversions from store records. It must not query anything or decide permissions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gangq.api import redaction
from gangq.queue.core import capacity, explain, model
from gangq.queue.kube import objects, podgroups, scale, status
from gangq.queue.store import events, jobs, runs, tenants

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
ENTRY_NAME_PATTERN = (
    rf"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?({re.escape(scale.SEPARATOR)}[1-9][0-9]{{0,8}})?$"
)
"""A queue entry's name: a TrainingJob's, or a scale-up gang's `<job>+<first replica>`."""
ENTRY_NAME_MAX = 253 + 10
"""A TrainingJob name's longest, `+` and the first replica's at most 9 digits."""
# A tier as the TrainingJob CRD accepts it in spec.tier.
TierName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]


class Schema(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class InputSchema(Schema):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


def _refuse_bool_and_text(kind: str, message: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool | str):
            raise PydanticCustomError(kind, message)
        return value

    return check


# JSON Schema's integer and number, which the OpenAPI document promises: `true` and "4" are
# neither (pydantic's lax mode would take them), 4.0 is the integer 4 (its strict mode refuses).
JsonInt = Annotated[
    int, BeforeValidator(_refuse_bool_and_text("int_type", "Input should be a valid integer"))
]
JsonNumber = Annotated[
    float, BeforeValidator(_refuse_bool_and_text("float_type", "Input should be a valid number"))
]


def instant(unix_s: float | None) -> datetime | None:
    return None if unix_s is None else datetime.fromtimestamp(unix_s, tz=UTC)


class PendingReasonOut(Schema):
    code: str
    message: str


class ScaleUpOut(Schema):
    job: str = Field(description="name of the TrainingJob whose replicas the gang adds")
    first_replica: int = Field(
        description="the job's replica index of the gang's first replica; the gang runs "
        "replicas firstReplica .. firstReplica + replicas - 1"
    )


class JobOut(Schema):
    namespace: str
    name: str
    uid: str
    tenant: str
    tier: str
    priority: int
    replicas: int
    min_replicas: int = Field(
        description="the least the job runs at: spec.elastic.minReplicas of an elastic job "
        "(PRODUCT rule 13), else replicas"
    )
    max_replicas: int = Field(description="the most the job runs at: replicas")
    size: int | None = Field(
        default=None,
        description="replicas it holds devices for (its latest admission's, less a shrink), "
        "between minReplicas and maxReplicas; while it grows, the replicas it runs at; kept "
        "once the job ends, null while it is queued",
    )
    growing_to: int | None = Field(
        default=None,
        description="the size a grow under way takes the job to, once its added replicas "
        "all run (PRODUCT rule 13); null when it is not growing",
    )
    shrinking_to: int | None = Field(
        default=None,
        description="an elastic job chosen to shrink instead of being evicted (PRODUCT rule "
        "13): the replicas it keeps; its history shows each resize; null otherwise",
    )
    devices_per_replica: int
    device_class_name: str
    phase: str
    submitted_at: datetime
    admitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    queue_position: int | None = Field(description="1 is next; only for queued jobs")
    reason: PendingReasonOut | None = Field(description="why the job waits (PRODUCT rule 10)")
    attempts: int
    preemptions: int
    restarts: int
    borrowed: int = Field(description="devices used above the tenant's nominal quota")
    evicting: bool
    checkpoint_requested_at: datetime | None = Field(
        default=None,
        description="an evicting job that opted in (spec.preemption.checkpointGraceSeconds): "
        "when gangq asked it for a checkpoint (PRODUCT rule 6)",
    )
    evict_by: datetime | None = Field(
        default=None,
        description="when that job is evicted at the latest, with or without a checkpoint",
    )
    reserved_start_at: datetime | None = Field(
        default=None,
        description="start a backfill reservation holds for this queued job (PRODUCT rule 5)",
    )
    eta_seconds: float | None = Field(
        default=None,
        ge=0,
        description="seconds from now until the reserved start; 0 once it is due; "
        "null without a reservation",
    )
    reserved_nodes: list[str] = Field(
        default_factory=list, description="nodes the backfill reservation holds for it"
    )
    scale_up: ScaleUpOut | None = Field(
        default=None,
        description="set on a scale-up gang, the queue entry `<job>+<first replica>` that "
        "admits a running job's added replicas (PRODUCT §5); null on a job's own entry",
    )

    @classmethod
    def of(
        cls, record: jobs.JobRecord, *, now: float, redact: redaction.Redact = redaction.identity
    ) -> JobOut:
        """The ETA is relative to `now`, so it is computed per response, never stored;
        `redact` rewrites the reason for the caller (other tenants' job names)."""
        namespace, _, name = record.key.partition("/")
        job, first = scale.split_name(name)
        reason = record.reason
        requested, evict_by = record.checkpoint_requested_at, record.evict_by
        if record.is_evicting and requested is not None and evict_by is not None:
            message = status.checkpoint_request(
                requested, evict_by, preemptor=record.evicted_for, shrink_to=record.shrink_to
            )
            reason = explain.PendingReason(explain.ReasonCode.PREEMPTION, message)
        return cls(
            namespace=namespace,
            name=name,
            uid=record.uid,
            tenant=record.tenant,
            tier=record.tier,
            priority=record.priority,
            replicas=record.replicas,
            min_replicas=record.replicas if record.min_replicas is None else record.min_replicas,
            max_replicas=record.replicas,
            size=record.size if record.grown_from is None else record.grown_from,
            growing_to=None if record.grown_from is None else record.size,
            shrinking_to=record.shrink_to,
            devices_per_replica=record.devices_per_replica,
            device_class_name=record.device_class,
            phase=record.phase,
            submitted_at=datetime.fromtimestamp(record.submitted_at, tz=UTC),
            admitted_at=instant(record.admitted_at),
            started_at=instant(record.started_at),
            finished_at=instant(record.finished_at),
            queue_position=record.position,
            reason=None
            if reason is None
            else PendingReasonOut(code=reason.code, message=redact(reason.message)),
            attempts=record.attempts,
            preemptions=record.preemptions,
            restarts=record.restarts,
            borrowed=record.borrowed,
            evicting=record.is_evicting,
            checkpoint_requested_at=instant(requested),
            evict_by=instant(evict_by),
            reserved_start_at=instant(record.reserved_start_at),
            eta_seconds=None
            if record.reserved_start_at is None
            else max(0.0, record.reserved_start_at - now),
            reserved_nodes=list(record.reserved_nodes),
            scale_up=ScaleUpOut(job=job, first_replica=first) if first else None,
        )


class JobPageOut(Schema):
    items: list[JobOut]
    total: int = Field(description="jobs matching the filters, over all pages")
    limit: int
    offset: int


class ReplicaPlacementOut(Schema):
    replica: int = Field(description="the job's replica index (its pod is `<job>-<replica>`)")
    node: str
    devices: list[str] = Field(description="device ids driver/pool/device")

    @classmethod
    def of(cls, placement: model.ReplicaPlacement, *, first: int = 0) -> ReplicaPlacementOut:
        """`first`: a scale-up gang counts its replicas from 0, its job from `first`."""
        return cls(
            replica=first + placement.replica, node=placement.node, devices=list(placement.devices)
        )


class EventOut(Schema):
    kind: str
    actor: str
    at: datetime
    reason: str
    details: dict[str, Any]

    @classmethod
    def of(cls, event: events.Event, *, redact: redaction.Redact = redaction.identity) -> EventOut:
        return cls(
            kind=event.kind,
            actor=event.actor,
            at=datetime.fromtimestamp(event.at, tz=UTC),
            reason=redact(event.reason),
            details=redaction.details(event.details, redact),
        )


class PredictionOut(Schema):
    runtime_seconds: float | None = Field(
        description="expected run, from the recent runs of the same tenant, tier, gang shape "
        "and family, at most maxRuntimeSeconds (PRODUCT rule 5); null when neither is known"
    )
    end_at: datetime | None = Field(
        description="when a job holding devices is expected to free them (lengthened once it "
        "outlives its prediction)"
    )
    lost_work_device_seconds: float | None = Field(
        description="device-seconds of work an eviction now would destroy: devices x time "
        "since the later of the start and the last checkpoint (PRODUCT rule 6)"
    )
    last_checkpoint_at: datetime | None = Field(
        description="the latest checkpoint the job reported (annotation gangq.dev/last-checkpoint)"
    )
    checkpoint_interval_seconds: float | None = Field(
        description="spec.checkpointIntervalSeconds: an eviction loses at most this much run"
    )

    @classmethod
    def of(cls, estimate: runs.Estimate) -> PredictionOut:
        return cls(
            runtime_seconds=estimate.predicted_runtime_s,
            end_at=instant(estimate.predicted_end_at),
            lost_work_device_seconds=estimate.lost_work_device_s,
            last_checkpoint_at=instant(estimate.last_checkpoint_at),
            checkpoint_interval_seconds=estimate.checkpoint_interval_s,
        )


class GangDetailOut(Schema):
    """One queue entry: a job's own gang, or one of its scale-up gangs."""

    job: JobOut
    placement: list[ReplicaPlacementOut] = Field(description="the devices it holds now")
    last_placement: list[ReplicaPlacementOut] = Field(
        default_factory=list,
        description="where its latest admission placed it, kept after the devices are "
        "released: where a finished or requeued job ran last; empty if never admitted",
    )
    history: list[EventOut]

    @classmethod
    def of(
        cls, detail: jobs.JobDetail, *, now: float, redact: redaction.Redact = redaction.identity
    ) -> GangDetailOut:
        first = scale.first_replica(detail.job.key)
        return GangDetailOut(
            job=JobOut.of(detail.job, now=now, redact=redact),
            placement=[ReplicaPlacementOut.of(p, first=first) for p in detail.placement],
            last_placement=[ReplicaPlacementOut.of(p, first=first) for p in detail.last_placement],
            history=[EventOut.of(e, redact=redact) for e in detail.history],
        )


class PodGroupOut(Schema):
    """A PodGroup of the job's gangs and what kube-scheduler last said of it."""

    name: str
    min_count: int = Field(description="pods kube-scheduler binds together, or none of them")
    scheduled: str = Field(
        description="condition PodGroupScheduled: True (bound together), False (cannot be "
        "bound now) or Pending (not tried yet)"
    )
    reason: str
    message: str
    since: datetime | None = Field(description="when the condition last changed")

    @classmethod
    def of(cls, group: podgroups.Scheduled) -> PodGroupOut:
        return cls(
            name=group.name,
            min_count=group.min_count,
            scheduled=group.status,
            reason=group.reason,
            message=group.message,
            since=instant(objects.parse_rfc3339(group.since)),
        )


class JobDetailOut(GangDetailOut):
    prediction: PredictionOut | None = None
    scale_ups: list[GangDetailOut] = Field(
        default_factory=list,
        description="a job's scale-up gangs, oldest first, finished ones included (PRODUCT "
        "§5); empty for a scale-up gang itself",
    )
    pod_groups: list[PodGroupOut] = Field(
        default_factory=list,
        description="the PodGroups of the job's running or starting gangs, oldest first "
        "(Kubernetes 1.35+ with gang scheduling on; empty elsewhere and once a gang ended)",
    )

    @classmethod
    def of(
        cls,
        detail: jobs.JobDetail,
        *,
        now: float,
        redact: redaction.Redact = redaction.identity,
        estimate: runs.Estimate | None = None,
        scale_ups: Sequence[jobs.JobDetail] = (),
        pod_groups: Sequence[podgroups.Scheduled] = (),
    ) -> JobDetailOut:
        return cls(
            **dict(GangDetailOut.of(detail, now=now, redact=redact)),
            prediction=None if estimate is None else PredictionOut.of(estimate),
            scale_ups=[GangDetailOut.of(gang, now=now, redact=redact) for gang in scale_ups],
            pod_groups=[PodGroupOut.of(group) for group in pod_groups],
        )


class QueueOut(Schema):
    tier: str
    tenant: str
    pending: int = Field(description="queued jobs waiting for devices, quota or their turn")
    admitted: int
    oldest_wait_seconds: float | None = Field(description="longest wait among the pending jobs")
    unschedulable: int = Field(
        description="queued jobs the cluster as configured can never run (reason code "
        "unschedulable, condition Schedulable=False NeverFits): not pending, no position"
    )

    @classmethod
    def of(cls, summary: jobs.QueueSummary) -> QueueOut:
        return cls(
            tier=summary.tier,
            tenant=summary.tenant,
            pending=summary.pending,
            admitted=summary.admitted,
            oldest_wait_seconds=summary.oldest_wait_s,
            unschedulable=summary.unschedulable,
        )


class QuotaOut(Schema):
    device_class_name: str
    nominal: int
    borrowing_limit: int
    weight: float
    allowed_tiers: list[str]


class TenantOut(Schema):
    name: str
    quotas: list[QuotaOut]

    @classmethod
    def of(cls, record: tenants.TenantRecord) -> TenantOut:
        return cls(
            name=record.name,
            quotas=[
                QuotaOut(
                    device_class_name=q.device_class,
                    nominal=q.nominal,
                    borrowing_limit=q.borrowing_limit,
                    weight=q.weight,
                    allowed_tiers=list(q.allowed_tiers),
                )
                for q in record.quotas
            ],
        )


class TenantDetailOut(TenantOut):
    history: list[EventOut] = Field(description="the latest quota changes, newest first")


class QuotaIn(InputSchema):
    device_class_name: str = Field(min_length=1, max_length=253, pattern=NAME_PATTERN)
    nominal: JsonInt = Field(
        ge=0,
        le=1_000_000,
        description="GPU-equivalents guaranteed to the tenant (a partition counts its share)",
    )
    borrowing_limit: JsonInt = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="GPU-equivalents it may use above nominal while idle",
    )
    weight: JsonNumber = Field(
        default=1.0, gt=0, le=1000, allow_inf_nan=False, description="fair-share weight"
    )
    allowed_tiers: list[TierName] = Field(
        default_factory=list, max_length=32, description="tiers the tenant may submit; empty: all"
    )


class TenantIn(InputSchema):
    quotas: list[QuotaIn] = Field(max_length=64)

    def to_quotas(self, tenant: str) -> tuple[model.TenantQuota, ...]:
        return tuple(
            model.TenantQuota(
                tenant=model.Tenant(tenant),
                device_class=q.device_class_name,
                nominal=q.nominal,
                borrowing_limit=q.borrowing_limit,
                weight=q.weight,
                allowed_tiers=tuple(q.allowed_tiers),
            )
            for q in self.quotas
        )


class ErrorOut(Schema):
    detail: str


ERROR_DESCRIPTIONS = {
    400: "a filter or change the store refuses; the message says what to fix",
    401: "no bearer token, or one that is unknown or expired",
    403: "the caller's role or tenants do not allow this",
    404: "no such object that the caller may read",
    413: "the request body is larger than the route's limit",
    429: "too many unknown tokens from this address: retry after Retry-After seconds",
    503: "PostgreSQL or the Kubernetes API server (token review) is unreachable, or the "
    "cluster view has not synced yet: retry shortly",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of the errors an operation can answer, each with an `ErrorOut` body."""
    return {code: {"model": ErrorOut, "description": ERROR_DESCRIPTIONS[code]} for code in codes}


AUTHENTICATED_ERRORS = error_responses(401, 403, 429, 503)
"""What every operation behind a bearer token and the database can answer."""


class GangShapeOut(Schema):
    replicas: int
    devices_per_replica: int
    devices: int


class UsageOut(Schema):
    """Counts in GPU-equivalents: a GPU published whole and as partitions is one, split between
    the states by what its reserved or held partitions take (docs/partitions.md)."""

    device_class_name: str
    total: int | float = Field(description="GPU-equivalents")
    free: int | float
    reserved: int | float
    held_by_others: int | float = Field(
        description="allocated by claims gangq did not make; never free"
    )
    unavailable: int | float = Field(description="tainted devices, NotReady or cordoned nodes")
    tainted: int | float = Field(
        description="on nodes with NoSchedule/NoExecute taints (`taintedNodes`): only jobs "
        "tolerating them may use these, so they are not free nor in the largest placeable gang"
    )
    largest_replica: int | float = Field(description="most free devices on one node")
    largest_placeable_gang: GangShapeOut = Field(
        description="whole-node replicas that could be placed now (CPU, memory and selectors aside)"
    )

    @classmethod
    def of(cls, device_class: str, usage: capacity.Usage) -> UsageOut:
        return cls(
            device_class_name=device_class,
            total=usage.total,
            free=usage.by_state["free"],
            reserved=usage.by_state["reserved"],
            held_by_others=usage.by_state["held_by_others"],
            unavailable=usage.by_state["unavailable"],
            tainted=usage.by_state["tainted"],
            largest_replica=usage.largest_replica,
            largest_placeable_gang=GangShapeOut(
                replicas=usage.whole_node_replicas,
                devices_per_replica=usage.devices_per_node,
                devices=usage.largest_gang_devices,
            ),
        )


class NodeCapacityOut(Schema):
    node: str
    device_classes: list[UsageOut]


class DomainCapacityOut(Schema):
    key: str
    value: str
    device_classes: list[UsageOut]


class TaintedNodeOut(Schema):
    node: str
    taints: list[str] = Field(
        description="the NoSchedule/NoExecute taints a job must tolerate, as key=value:Effect"
    )


class CapacityOut(Schema):
    device_classes: list[UsageOut]
    domains: list[DomainCapacityOut]
    nodes: list[NodeCapacityOut]
    tainted_nodes: list[TaintedNodeOut] = Field(
        description="nodes whose devices are counted as tainted, with their taints"
    )

    @classmethod
    def of(cls, report: capacity.CapacityReport) -> CapacityOut:
        def usages(by_class: Mapping[str, capacity.Usage]) -> list[UsageOut]:
            return [UsageOut.of(name, by_class[name]) for name in sorted(by_class)]

        return cls(
            device_classes=usages(report.classes),
            domains=[
                DomainCapacityOut(
                    key=key, value=value, device_classes=usages(report.domains[(key, value)])
                )
                for key, value in sorted(report.domains)
            ],
            nodes=[
                NodeCapacityOut(node=name, device_classes=usages(report.nodes[name]))
                for name in sorted(report.nodes)
            ],
            tainted_nodes=tainted_nodes(report),
        )


def tainted_nodes(report: capacity.CapacityReport) -> list[TaintedNodeOut]:
    return [
        TaintedNodeOut(node=name, taints=[str(t) for t in taints])
        for name, taints in report.tainted_nodes.items()
    ]


class HolderOut(Schema):
    key: str = Field(description="namespace/name of the job holding devices")
    tenant: str
    tier: str


class NodeCellsOut(Schema):
    name: str
    status: str = Field(description="Ready, NotReady or Cordoned")
    taints: list[str] = Field(
        description="NoSchedule/NoExecute taints a job must tolerate to use the node's "
        "devices, as key=value:Effect (only on Ready, uncordoned nodes)"
    )
    devices: list[tuple[str, str, int]] = Field(
        description="per device: its name, its state (free, reserved, held_by_others, "
        "unavailable, tainted) and the index of its holder in `jobs`, -1 when none is shown "
        "(a free device, or one reserved by a job the caller may not read)"
    )


class RackCellsOut(Schema):
    name: str = Field(description="value of the rack label; '' for nodes without it")
    nodes: list[NodeCellsOut]


class ClassCellsOut(Schema):
    usage: UsageOut
    racks: list[RackCellsOut]


class ClusterOut(Schema):
    rack_label: str
    device_classes: list[ClassCellsOut]
    jobs: list[HolderOut] = Field(description="jobs holding devices that the caller may read")


class PendingOut(Schema):
    job: JobOut
    ahead: int = Field(description="queued jobs of the same device class ranked before it")
    blockers: list[str] = Field(
        description="the nearest of those, nearest first (other tenants' jobs unnamed)"
    )


class PendingPageOut(Schema):
    items: list[PendingOut]
    total: int = Field(description="queued jobs the caller may read")


class TenantClassUseOut(Schema):
    device_class_name: str
    nominal: int
    borrowing_limit: int
    in_use: int
    borrowed: int
    waiting_jobs: int
    waiting_devices: int


class TenantUsageOut(Schema):
    name: str
    device_classes: list[TenantClassUseOut]
    device_hours_last_day: float
    device_hours_last_week: float


class LedgerOut(Schema):
    victim_tenant: str | None = Field(description="null: a tenant the caller may not read")
    victim_tier: str
    by_tenant: str | None = Field(
        description="null: a tenant the caller may not read, or a preemptor no longer stored"
    )
    by_tier: str | None
    evictions: int
    shrinks: int = Field(description="elastic gangs shrunk instead of evicted")
    lost_device_hours: float


class UsageReportOut(Schema):
    tenants: list[TenantUsageOut]
    ledger: list[LedgerOut] = Field(description="evictions and shrinks of the last 7 days")
