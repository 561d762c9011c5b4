"""The queue: jobs from enqueue to finish, and the read views the API and CLI show.

Owns the job rows: enqueue (idempotent per Kubernetes uid), the lifecycle steps the controller
records (running, finished, requeued with the original submission time, suspended, resumed)
and the views (lists, one job, summary per tier and tenant). The cycle reads the queue through
`snapshot` and admits through `admission`; nothing here decides who runs.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import explain, model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import bulk, events, liverows, reservations, spec, timestamps
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import (
    ADMITTED,
    FAILED,
    FINISHED_PHASES,
    HOLDING_PHASES,
    PHASES,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    EventKind,
    JobRow,
    QuotaRow,
)

LIVE_KEY_INDEX = "uq_jobs_live_key"
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_ENQUEUE_ARRAYS = {
    "uids": "text",
    "namespaces": "text",
    "names": "text",
    "tenants": "text",
    "tiers": "text",
    "priorities": "integer",
    "replicas": "integer",
    "devices": "integer",
    "classes": "text",
    "specs": "text",
    "submitted": "timestamptz",
    "max_runtimes": "integer",
    "min_replicas": "integer",
}
ENQUEUE = text(
    """
    INSERT INTO jobs (uid, namespace, name, tenant, tier, priority, replicas,
                      devices_per_replica, device_class, spec, submitted_at, max_runtime_s,
                      min_replicas)
    SELECT u.uid, u.namespace, u.name, u.tenant, u.tier, u.priority, u.replicas, u.devices,
           u.class, CAST(u.spec AS jsonb), u.submitted, u.max_runtime, u.min_replicas
    FROM unnest("""
    + ", ".join(f"CAST(:{name} AS {kind}[])" for name, kind in _ENQUEUE_ARRAYS.items())
    + """) AS u(uid, namespace, name, tenant, tier, priority, replicas, devices, class, spec,
             submitted, max_runtime, min_replicas)
    ON CONFLICT (uid) DO NOTHING
    RETURNING id, namespace, name, tenant, tier
    """
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Why a job ended: a CamelCase cause (Succeeded, OOMKilled, NodeLost...) and a sentence
    naming the replica, node and exit code or cause."""

    cause: str
    message: str


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as people see it: its request, where it is in its life and why it waits."""

    key: model.JobKey
    uid: str
    tenant: model.Tenant
    tier: str
    priority: int
    replicas: int
    devices_per_replica: int
    device_class: str
    phase: str
    submitted_at: float
    admitted_at: float | None
    started_at: float | None
    finished_at: float | None
    position: int | None
    reason: explain.PendingReason | None
    attempts: int
    preemptions: int
    restarts: int
    borrowed: int
    is_evicting: bool
    reserved_start_at: float | None = None
    """Unix seconds a backfill reservation holds for this queued job (rule 5): its ETA."""
    checkpoint_requested_at: float | None = None
    """An evicting job asked for a checkpoint first: when it was asked."""
    evict_by: float | None = None
    """The end of its grace: evicted then at the latest."""
    evicted_for: str | None = None
    """The job an evicting job makes room for."""
    reserved_nodes: tuple[str, ...] = ()
    """The nodes that reservation holds (empty without one)."""
    outcome: Outcome | None = None
    """Why a finished job ended."""
    min_replicas: int | None = None
    """`spec.elastic.minReplicas`: the least an elastic job runs at; None: not elastic."""
    size: int | None = None
    """Replicas it holds devices for (its admission's, less a shrink, plus a grow under
    way), kept once it ends; None while queued."""
    shrink_to: int | None = None
    """An elastic gang chosen to shrink (rule 13): the replicas it keeps; None otherwise."""
    grown_from: int | None = None
    """The size a grow under way started from (rule 13): `size` is what it grows to."""


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: JobRecord
    placement: tuple[model.ReplicaPlacement, ...]
    """The devices it holds now."""
    history: tuple[events.Event, ...]
    last_placement: tuple[model.ReplicaPlacement, ...] = ()
    """Where its latest admission placed it, released or not: where a finished job ran."""


@dataclass(frozen=True, slots=True)
class JobPage:
    items: tuple[JobRecord, ...]
    total: int


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """Per tier and tenant: jobs waiting, jobs holding devices, the longest wait in seconds,
    and queued jobs the cluster as configured can never run (rule 10): those wait for nothing,
    so they are neither pending nor part of the longest wait."""

    tier: str
    tenant: model.Tenant
    pending: int
    admitted: int
    oldest_wait_s: float | None
    unschedulable: int


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    if not namespace or not name or "/" in name:
        raise InvalidInputError(f"job key {key!r} is not namespace/name")
    return namespace, name


def validate(job: model.PendingJob) -> None:
    """What the columns cannot hold, all named at once (integers printed as integers)."""
    split_key(job.key)
    problems = [
        f"{field} must not be empty"
        for field, value in (("uid", job.uid), ("tenant", job.tenant), ("tier", job.tier))
        if not value
    ]
    if not job.device_class:
        problems.append("deviceClassName must not be empty")
    if job.replicas < 1:
        problems.append(f"replicas must be >= 1, got {job.replicas}")
    if job.devices_per_replica < 1:
        problems.append(f"devicesPerReplica must be >= 1, got {job.devices_per_replica}")
    if job.min_replicas is not None and not 1 <= job.min_replicas <= job.replicas:
        problems.append(
            f"elastic.minReplicas must be 1..replicas ({job.replicas}), got {job.min_replicas}"
        )
    runtime = None if job.max_runtime_s is None else round(job.max_runtime_s)
    if runtime is not None and runtime <= 0:
        problems.append(f"maxRuntimeSeconds must be > 0, got {runtime}")
    for field, number in (
        ("priority", job.priority),
        ("replicas", job.replicas),
        ("devicesPerReplica", job.devices_per_replica),
        ("maxRuntimeSeconds", runtime or 0),
    ):
        if not _INT32_MIN <= number <= _INT32_MAX:
            problems.append(f"{field} {number} is outside the 32-bit range Kubernetes allows")
    if problems:
        raise InvalidInputError(f"job {job.key}: " + "; ".join(problems))


def _columns(jobs: Sequence[model.PendingJob]) -> dict[str, list[object]]:
    """The jobs as one array per column, the shape `ENQUEUE` unnests."""
    columns: dict[str, list[object]] = {name: [] for name in _ENQUEUE_ARRAYS}
    for job in jobs:
        namespace, name = split_key(job.key)
        max_runtime = None if job.max_runtime_s is None else int(job.max_runtime_s)
        for column, value in (
            ("uids", job.uid),
            ("namespaces", namespace),
            ("names", name),
            ("tenants", job.tenant),
            ("tiers", job.tier),
            ("priorities", job.priority),
            ("replicas", job.replicas),
            ("devices", job.devices_per_replica),
            ("classes", job.device_class),
            ("specs", json.dumps(spec.encode(job))),
            ("submitted", timestamps.to_datetime(job.submitted_at)),
            ("max_runtimes", max_runtime),
            ("min_replicas", job.min_replicas),
        ):
            columns[column].append(value)
    return columns


async def enqueue(
    session: AsyncSession, jobs: Sequence[model.PendingJob], *, actor: str, now: float
) -> int:
    """Queue jobs in one statement; a uid already known is skipped (replays are harmless).

    Returns how many were new. A live job with the same namespace/name but another uid is a
    conflict: the old one must finish or be deleted first.
    """
    for job in jobs:
        validate(job)
    if not jobs:
        return 0
    try:
        created = (await session.execute(ENQUEUE, _columns(jobs))).all()
    except IntegrityError as error:
        if LIVE_KEY_INDEX in str(error.orig):
            raise ConflictError(
                f"a live job with the same namespace/name already exists: {error.orig}"
            ) from error
        raise
    await events.record(
        session,
        [
            (
                job_id,
                events.Event(
                    kind=EventKind.ENQUEUED,
                    actor=actor,
                    at=now,
                    job_key=f"{namespace}/{name}",
                    tenant=tenant,
                    reason=f"queued in tier {tier}",
                ),
            )
            for job_id, namespace, name, tenant, tier in created
        ],
    )
    return len(created)


async def _live(session: AsyncSession, key: str) -> JobRow:
    namespace, name = split_key(key)
    row = await session.scalar(
        select(JobRow)
        .where(JobRow.namespace == namespace, JobRow.name == name)
        .where(JobRow.phase.not_in(FINISHED_PHASES))
        .with_for_update()
    )
    if row is None:
        raise InvalidInputError(f"no live job {key}")
    return row


async def live_row(session: AsyncSession, uid: str) -> JobRow | None:
    """The job's row while it has not finished, locked for the caller's transaction."""
    return await session.scalar(
        select(JobRow)
        .where(JobRow.uid == uid, JobRow.phase.not_in(FINISHED_PHASES))
        .with_for_update()
    )


async def record_event(
    session: AsyncSession,
    row: JobRow,
    *,
    kind: EventKind,
    actor: str,
    at: float,
    reason: str,
    details: Mapping[str, object] | None = None,
) -> None:
    """One history entry of the job (refusals write theirs through it too)."""
    event = events.Event(
        kind=kind,
        actor=actor,
        at=at,
        job_key=f"{row.namespace}/{row.name}",
        tenant=row.tenant,
        reason=reason,
        details=dict(details or {}),
    )
    await events.record(session, [(row.id, event)])


@dataclass(frozen=True, slots=True)
class Start:
    """A gang whose pods all run (`start_all`), with the release skew when the caller
    measured it (it goes into the history entry the job page shows)."""

    key: str
    release_skew_ms: int | None = None


def _key_columns(keys: Iterable[str]) -> dict[str, list[str]]:
    """`namespaces` and `names` for the `unnest` of a batch statement, each key split once."""
    split = [split_key(key) for key in keys]
    return {"namespaces": [ns for ns, _ in split], "names": [name for _, name in split]}


START = text(
    f"""
    UPDATE jobs AS j SET phase = '{RUNNING}', started_at = :at
    FROM unnest(CAST(:namespaces AS text[]), CAST(:names AS text[])) AS u(namespace, name)
    WHERE j.namespace = u.namespace AND j.name = u.name AND j.phase = '{ADMITTED}'
    RETURNING j.id, j.namespace, j.name, j.tenant
    """
)


async def start_all(
    session: AsyncSession, starts: Sequence[Start], *, at: float, actor: str
) -> None:
    """These gangs' pods all run: their runtime bounds start counting now (rule 5).

    Two statements however many start, as in `finish_all`; when one of them is not an
    Admitted live job, `InvalidInputError` names it and the caller's transaction writes
    nothing."""
    if not starts:
        return
    rows = await session.execute(
        START,
        {
            "at": timestamps.to_datetime(at),
            **_key_columns(s.key for s in starts),
        },
    )
    started = {f"{namespace}/{name}": (job_id, tenant) for job_id, namespace, name, tenant in rows}
    for start in starts:
        if start.key not in started:
            row = await _live(session, start.key)
            raise InvalidInputError(
                f"job {start.key} is {row.phase}, only an Admitted job can start"
            )
    entries: list[tuple[int | None, events.Event]] = []
    for start in starts:
        job_id, tenant = started[start.key]
        skew = start.release_skew_ms
        event = events.Event(
            kind=EventKind.STARTED,
            actor=actor,
            at=at,
            job_key=start.key,
            tenant=tenant,
            reason="all pods running",
            details={} if skew is None else {"release_skew_ms": skew},
        )
        entries.append((job_id, event))
    await events.record(session, entries)


@dataclass(frozen=True, slots=True)
class Ending:
    """A job that ended for good (`finish_all`): its cause and reason stay on the row (its
    answer to "why did it end"), each failed replica's node, exit code and message go into
    the history."""

    key: str
    succeeded: bool
    reason: str
    cause: str = ""
    failures: Sequence[Mapping[str, object]] = ()


FINISH = text(
    f"""
    UPDATE jobs AS j
    SET phase = u.phase, finished_at = :at, evicting = false, checkpoint_requested_at = NULL,
        evict_by = NULL, evicted_for = NULL, shrink_to = NULL, grown_from = NULL,
        pending_code = u.code,
        pending_message = u.message, queue_position = NULL, reserved_start_at = NULL,
        reserved_nodes = NULL
    FROM unnest(CAST(:namespaces AS text[]), CAST(:names AS text[]), CAST(:phases AS text[]),
                CAST(:codes AS text[]), CAST(:messages AS text[]))
         AS u(namespace, name, phase, code, message)
    WHERE j.namespace = u.namespace AND j.name = u.name
      AND j.phase NOT IN ({", ".join(f"'{phase}'" for phase in FINISHED_PHASES)})
    RETURNING j.id, j.namespace, j.name, j.tenant
    """
)


async def finish(
    session: AsyncSession,
    key: str,
    *,
    succeeded: bool,
    at: float,
    actor: str,
    reason: str,
    cause: str = "",
    failures: Sequence[Mapping[str, object]] = (),
) -> None:
    """The gang ended for good: see `finish_all`."""
    ending = Ending(key, succeeded=succeeded, reason=reason, cause=cause, failures=failures)
    await finish_all(session, [ending], at=at, actor=actor)


async def finish_all(
    session: AsyncSession, endings: Sequence[Ending], *, at: float, actor: str
) -> None:
    """These gangs ended for good: their devices are released and their rows stay for history.

    Three statements however many end (a burst of endings costs one round of writes); when
    one of them is not live, nothing is written and `InvalidInputError` names it."""
    if not endings:
        return
    instant = timestamps.to_datetime(at)
    rows = await session.execute(
        FINISH,
        {
            "at": instant,
            **_key_columns(e.key for e in endings),
            "phases": [SUCCEEDED if e.succeeded else FAILED for e in endings],
            "codes": [e.cause or None for e in endings],
            "messages": [e.reason for e in endings],
        },
    )
    ended = {f"{namespace}/{name}": (job_id, tenant) for job_id, namespace, name, tenant in rows}
    missing = [e.key for e in endings if e.key not in ended]
    if missing or len(ended) != len(endings):
        raise InvalidInputError(f"no live job {missing[0] if missing else endings[0].key}")
    freed = await reservations.release(
        session, [job_id for job_id, _ in ended.values()], at=instant
    )
    entries: list[tuple[int | None, events.Event]] = []
    for ending in endings:
        job_id, tenant = ended[ending.key]
        details: dict[str, object] = {"devices_released": freed[job_id]}
        if ending.failures:
            details["replicas"] = list(ending.failures)
        event = events.Event(
            kind=EventKind.SUCCEEDED if ending.succeeded else EventKind.FAILED,
            actor=actor,
            at=at,
            job_key=ending.key,
            tenant=tenant,
            reason=ending.reason,
            details=details,
        )
        entries.append((job_id, event))
    await events.record(session, entries)


async def release_from(session: AsyncSession, row: JobRow, *, keep: int, at: float) -> int:
    """Replicas from `keep` on give back their devices, borrowed ones first (rule 3: use above
    nominal is what goes back before nominal); the others keep theirs. A grow under way whose
    added replicas were all among them is over (rule 13). Returns how many devices came
    free."""
    released = await reservations.release(
        session, [row.id], at=timestamps.to_datetime(at), from_replica=keep
    )
    freed = released[row.id]
    row.size, row.borrowed = keep, max(0, row.borrowed - freed)
    if row.grown_from is not None and keep <= row.grown_from:
        row.grown_from = None
    return freed


async def shrink(session: AsyncSession, key: str, *, replicas: int, at: float, actor: str) -> int:
    """A running long-running job gives back its replicas from `replicas` on (PRODUCT §5);
    the others keep their devices. Returns how many devices came free."""
    row = await _live(session, key)
    if row.phase != RUNNING or not 1 <= replicas < row.replicas:
        raise InvalidInputError(
            f"job {key} is {row.phase} with {row.replicas} replicas: cannot shrink to {replicas}"
        )
    freed = await release_from(session, row, keep=replicas, at=at)
    row.replicas = replicas
    if row.min_replicas is not None:
        row.min_replicas = min(row.min_replicas, replicas)
    reason = f"scaled down to {replicas} replicas"
    details = {"devices_released": freed}
    await record_event(
        session, row, kind=EventKind.RELEASED, actor=actor, at=at, reason=reason, details=details
    )
    return freed


async def shrunk(
    session: AsyncSession, key: str, *, reason: str, lost_device_s: float, at: float, actor: str
) -> int:
    """An elastic gang chosen to shrink (rule 13) has no pod or claim left of its replicas
    from `shrink_to` on: their devices come free and the gang runs on at that size, never
    queued again. `lost_device_s` is what re-forming the whole gang from its checkpoint
    destroyed: it counts against preempting the job again and goes into the preemption ledger
    with the job it made room for; the history entry is `reason` with that loss. Returns how
    many devices came free."""
    row = await _live(session, key)
    keep = row.shrink_to
    if keep is None or not row.evicting or row.phase not in HOLDING_PHASES:
        raise InvalidInputError(f"job {key} is {row.phase} and not shrinking")
    size = row.size or row.replicas
    freed = await release_from(session, row, keep=keep, at=at)
    row.lost_device_s += lost_device_s
    lost_h = round(lost_device_s / 3600.0, 3)
    details = {
        "for": row.evicted_for,
        "from": size,
        "to": keep,
        "devices_released": freed,
        "lost_device_h": lost_h,
    }
    row.evicting, row.shrink_to = False, None
    row.checkpoint_requested_at = row.evict_by = row.evicted_for = None
    await record_event(
        session,
        row,
        kind=EventKind.RELEASED,
        actor=actor,
        at=at,
        reason=f"{reason}, lost {lost_h:g} device-h",
        details=details,
    )
    return freed


async def requeue(
    session: AsyncSession,
    key: str,
    *,
    at: float,
    actor: str,
    reason: str,
    preempted: bool = False,
    backoff_s: float = 0.0,
    failures: Sequence[Mapping[str, object]] = (),
    waiting: explain.PendingReason | None = None,
    lost_device_s: float | None = None,
) -> None:
    """Release the gang whole and queue it again with its original submission time (rule 6, 8);
    each failed replica's node, exit code and message go into the history. A gang requeued
    for a problem of gangq's own (rule 14) counts as neither a restart nor a preemption, and
    shows `waiting` as its reason until its backoff ends and the cycle judges it again.

    `lost_device_s` is the work the eviction of a victim asked for a checkpoint first
    destroyed, known only now (the others' was counted when they were chosen): it counts
    against evicting the job again and goes into the preemption ledger with its preemptor."""
    row = await _live(session, key)
    instant = timestamps.to_datetime(at)
    freed = (await reservations.release(session, [row.id], at=instant))[row.id]
    details: dict[str, object] = {"devices_released": freed, "backoff_s": backoff_s}
    if lost_device_s is not None:
        row.lost_device_s += lost_device_s
        details |= {"for": row.evicted_for, "lost_device_h": round(lost_device_s / 3600.0, 3)}
    row.phase, row.evicting, row.borrowed, row.size = QUEUED, False, 0, None
    row.checkpoint_requested_at = row.evict_by = row.evicted_for = row.shrink_to = None
    row.grown_from = None
    row.admitted_at = row.started_at = row.reserved_start_at = row.reserved_nodes = None
    row.not_before = timestamps.to_datetime(at + backoff_s) if backoff_s > 0 else None
    row.queued_at = instant
    if waiting is not None:
        row.pending_code, row.pending_message = str(waiting.code), waiting.message
    elif preempted:
        row.preemptions += 1
    else:
        row.restarts += 1
    await record_event(
        session, row, kind=EventKind.RELEASED, actor=actor, at=at, reason=reason, details=details
    )
    requeued = {"replicas": list(failures)} if failures else None
    await record_event(
        session, row, kind=EventKind.REQUEUED, actor=actor, at=at, reason=reason, details=requeued
    )


async def adopt(
    session: AsyncSession,
    uid: str,
    placement: Sequence[model.ReplicaPlacement],
    *,
    admitted_at: datetime,
    started_at: float,
    inventory: model.Inventory,
    at: float,
    actor: str,
    reason: str,
) -> None:
    """Hold a gang the cluster runs and the store did not know of (module `recovery`): its
    devices reserved as its claims hold them, the job Running from `started_at`, borrowing
    what its tenant has above nominal. A device another job holds raises ConflictError."""
    row = await session.scalar(select(JobRow).where(JobRow.uid == uid).with_for_update())
    if row is None or row.phase != QUEUED:
        found = "no queue entry" if row is None else f"phase {row.phase}"
        raise InvalidInputError(f"job {uid}: only a queued job can be adopted, it has {found}")
    size = len(placement)
    devices = size * row.devices_per_replica
    quota = await session.scalar(
        select(QuotaRow.nominal).where(
            QuotaRow.tenant == row.tenant, QuotaRow.device_class == row.device_class
        )
    )
    used = sum(
        u.in_use
        for u in await tenant_use(session)
        if (u.tenant, u.device_class) == (row.tenant, row.device_class)
    )
    await reservations.reserve(
        session, [(row.id, placement)], at=timestamps.to_datetime(at), inventory=inventory
    )
    row.phase, row.size, row.attempts = RUNNING, size, row.attempts + 1
    row.borrowed = min(devices, max(0, used + devices - (quota or 0)))
    row.admitted_at, row.started_at = admitted_at, timestamps.to_datetime(started_at)
    row.pending_code = row.pending_message = row.queue_position = None
    row.reserved_start_at = row.reserved_nodes = row.not_before = None
    row.updated_at = timestamps.to_datetime(at)
    await record_event(
        session,
        row,
        kind=EventKind.RECOVERED,
        actor=actor,
        at=at,
        reason=reason,
        details={
            "action": "adopted",
            "placement": [
                {"replica": r.replica, "node": r.node, "devices": list(r.devices)}
                for r in placement
            ],
            "borrowed": row.borrowed,
        },
    )


async def suspend(session: AsyncSession, key: str, *, at: float, actor: str, reason: str) -> None:
    """Take the job out of the queue (releasing its gang whole) until `resume`."""
    row = await _live(session, key)
    released = await reservations.release(session, [row.id], at=timestamps.to_datetime(at))
    freed = released[row.id]
    row.phase, row.evicting, row.borrowed, row.size = SUSPENDED, False, 0, None
    row.checkpoint_requested_at = row.evict_by = row.evicted_for = row.shrink_to = None
    row.grown_from = None
    row.admitted_at = row.started_at = None
    row.pending_code = row.pending_message = None
    row.queue_position = row.reserved_start_at = row.reserved_nodes = None
    details = {"devices_released": freed}
    await record_event(
        session, row, kind=EventKind.SUSPENDED, actor=actor, at=at, reason=reason, details=details
    )


async def resume(session: AsyncSession, key: str, *, at: float, actor: str) -> None:
    """Queue a suspended job again; it keeps its original submission time."""
    row = await _live(session, key)
    if row.phase != SUSPENDED:
        raise InvalidInputError(f"job {key} is {row.phase}, only a Suspended job can resume")
    row.phase = QUEUED
    await record_event(session, row, kind=EventKind.RESUMED, actor=actor, at=at, reason="resumed")


class _RecordFields(Protocol):
    """The columns a `JobRecord` is made of: a `JobRow`, or a row of `_RECORD_COLUMNS`."""

    namespace: str
    name: str
    uid: str
    tenant: str
    tier: str
    priority: int
    replicas: int
    devices_per_replica: int
    device_class: str
    phase: str
    submitted_at: datetime
    admitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    queue_position: int | None
    pending_code: str | None
    pending_message: str | None
    attempts: int
    preemptions: int
    restarts: int
    borrowed: int
    evicting: bool
    reserved_start_at: datetime | None
    reserved_nodes: list[str] | None
    checkpoint_requested_at: datetime | None
    evict_by: datetime | None
    evicted_for: str | None
    min_replicas: int | None
    size: int | None
    shrink_to: int | None
    grown_from: int | None


_RECORD_COLUMNS = tuple(getattr(JobRow, name) for name in _RecordFields.__annotations__)
"""Selected alone for lists of records: the job's spec (JSON) is not decoded for nothing."""


def _record_view(row: _RecordFields) -> JobRecord:
    reason = outcome = None
    if row.phase in FINISHED_PHASES and row.pending_message is not None:
        outcome = Outcome(row.pending_code or "", row.pending_message)
    if row.pending_code is not None and (
        row.phase not in FINISHED_PHASES or row.pending_code == explain.ReasonCode.INVALID
    ):
        # a job refused for its spec ended Failed, and its reason stays what REST shows
        reason = explain.PendingReason(
            explain.ReasonCode(row.pending_code), row.pending_message or ""
        )
    return JobRecord(
        key=model.JobKey(f"{row.namespace}/{row.name}"),
        uid=row.uid,
        tenant=model.Tenant(row.tenant),
        tier=row.tier,
        priority=row.priority,
        replicas=row.replicas,
        devices_per_replica=row.devices_per_replica,
        device_class=row.device_class,
        phase=row.phase,
        submitted_at=timestamps.to_unix(row.submitted_at),
        admitted_at=timestamps.optional_unix(row.admitted_at),
        started_at=timestamps.optional_unix(row.started_at),
        finished_at=timestamps.optional_unix(row.finished_at),
        position=row.queue_position,
        reason=reason,
        attempts=row.attempts,
        preemptions=row.preemptions,
        restarts=row.restarts,
        borrowed=row.borrowed,
        is_evicting=row.evicting,
        reserved_start_at=timestamps.optional_unix(row.reserved_start_at),
        reserved_nodes=tuple(row.reserved_nodes or ()),
        outcome=outcome,
        checkpoint_requested_at=timestamps.optional_unix(row.checkpoint_requested_at),
        evict_by=timestamps.optional_unix(row.evict_by),
        evicted_for=row.evicted_for,
        min_replicas=row.min_replicas,
        size=row.size,
        shrink_to=row.shrink_to,
        grown_from=row.grown_from,
    )


async def list_jobs(
    session: AsyncSession,
    *,
    tenant: str | Collection[str] | None = None,
    tier: str | None = None,
    phase: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> JobPage:
    """A page of jobs, newest submission first, with the total count for the filters.

    `tenant` is one tenant or several (a viewer of several tenants sees all of theirs in one
    list); an empty collection matches no job, None every tenant.
    """
    if phase is not None and phase not in PHASES:
        raise InvalidInputError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
    if not 1 <= limit <= 1000 or offset < 0:
        raise InvalidInputError("limit must be 1..1000 and offset >= 0")
    query = select(*_RECORD_COLUMNS)
    if tenant is not None:
        chosen = [tenant] if isinstance(tenant, str) else sorted(tenant)
        query = query.where(JobRow.tenant.in_(chosen))
    for column, value in ((JobRow.tier, tier), (JobRow.phase, phase)):
        if value is not None:
            query = query.where(column == value)
    total = await session.scalar(select(func.count()).select_from(query.subquery()))
    rows = await session.execute(
        query.order_by(JobRow.submitted_at.desc(), JobRow.id.desc()).limit(limit).offset(offset)
    )
    return JobPage(
        items=tuple(_record_view(cast(_RecordFields, row)) for row in rows), total=int(total or 0)
    )


_CHOSEN = select(*_RECORD_COLUMNS).where(JobRow.uid.in_(bulk.text_set("chosen")))
_LIVE = select(*_RECORD_COLUMNS).where(JobRow.phase.not_in(FINISHED_PHASES))
_WRITTEN_SINCE = select(*_RECORD_COLUMNS).where(JobRow.changed_by >= bindparam("since"))


class LiveRecords:
    """The controller's per-step view: every job not finished, and the finished ones it asks
    for, by uid (finished jobs pile up without bound, and it needs only the few whose end the
    cluster does not show yet).

    It reads the live set several times a step. The live records are kept between reads and
    only the rows written since are read again (`liverows` says why none is missed); a record
    whose row is unchanged is reused, since building it costs more than comparing the row.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[object, ...], JobRecord]] = {}
        self._live: dict[str, tuple[tuple[object, ...], JobRecord]] = {}
        self._since: int | None = None

    async def read(self, session: AsyncSession, *, uids: Collection[str]) -> dict[str, JobRecord]:
        since = await liverows.oldest_running(session)
        if self._since is None:
            self._live = {}
            rows = await bulk.column_rows(session, _LIVE)
        else:
            rows = await bulk.column_rows(session, _WRITTEN_SINCE, {"since": self._since})
        for row in rows:
            if row.phase in FINISHED_PHASES:
                self._live.pop(row.uid, None)
            else:
                self._live[row.uid] = self._reused(row)
        self._since = since
        seen = dict(self._live)
        others = [uid for uid in uids if uid not in seen]
        if others:
            chosen = {"chosen": bulk.text_set_value(others)}
            for row in await bulk.column_rows(session, _CHOSEN, chosen):
                seen[row.uid] = self._reused(row)
        self._seen = seen
        return {uid: record for uid, (_, record) in seen.items()}

    async def read_again(
        self, session: AsyncSession, *, uids: Collection[str]
    ) -> dict[str, JobRecord]:
        """The records of these uids as they are now, finished ones included: after writes
        whose records are known, rather than the whole live set again."""
        rows = await bulk.column_rows(session, _CHOSEN, {"chosen": bulk.text_set_value(uids)})
        found: dict[str, JobRecord] = {}
        for row in rows:
            self._seen[row.uid] = known = self._reused(row)
            found[row.uid] = known[1]
        return found

    def _reused(self, row: Any) -> tuple[tuple[object, ...], JobRecord]:
        """The row (a named tuple) and its record: the one last read while the row is
        unchanged."""
        known = self._seen.get(row.uid)
        if known is None or known[0] != row:
            known = (row, _record_view(row))
        return known


async def get_job(session: AsyncSession, key: str) -> JobDetail | None:
    """The live job of that key (else its latest finished run), placement and history."""
    namespace, name = split_key(key)
    row = await session.scalar(
        select(JobRow)
        .where(JobRow.namespace == namespace, JobRow.name == name)
        .order_by(JobRow.phase.in_(FINISHED_PHASES), JobRow.id.desc())
        .limit(1)
    )
    if row is None:
        return None
    placement = (await reservations.active_by_job(session, [row.id])).get(row.id, ())
    history = await events.for_job(session, key)
    last = (await events.last_placements(session, [row.id])).get(row.id, ())
    return JobDetail(
        job=_record_view(row), placement=placement, history=history, last_placement=last
    )


async def get_entries(
    session: AsyncSession, namespace: str, *, uid_prefix: str
) -> tuple[JobDetail, ...]:
    """The queue entries of `namespace` whose uid starts with `uid_prefix`, oldest first,
    each with its own placement and history: a job's scale-up gangs, whose uids extend the
    job's (`kube/scale.py` names them)."""
    rows = (
        await session.scalars(
            select(JobRow)
            .where(
                JobRow.namespace == namespace, JobRow.uid.startswith(uid_prefix, autoescape=True)
            )
            .order_by(JobRow.id)
        )
    ).all()
    if not rows:
        return ()
    ids = [row.id for row in rows]
    placements = await reservations.active_by_job(session, ids)
    histories = await events.for_rows(session, ids)
    last = await events.last_placements(session, ids)
    return tuple(
        JobDetail(
            job=_record_view(row),
            placement=placements.get(row.id, ()),
            history=histories[row.id],
            last_placement=last.get(row.id, ()),
        )
        for row in rows
    )


async def queue_summary(session: AsyncSession, *, now: float) -> tuple[QueueSummary, ...]:
    never_fits = func.coalesce(JobRow.pending_code, "") == explain.ReasonCode.UNSCHEDULABLE.value
    queued = JobRow.phase == QUEUED
    waiting = queued & ~never_fits
    rows = await session.execute(
        select(
            JobRow.tier,
            JobRow.tenant,
            func.count().filter(waiting),
            func.count().filter(JobRow.phase.in_(HOLDING_PHASES)),
            func.min(JobRow.submitted_at).filter(waiting),
            func.count().filter(queued & never_fits),
        )
        .where(JobRow.phase.not_in(FINISHED_PHASES))
        .group_by(JobRow.tier, JobRow.tenant)
        .order_by(JobRow.tier, JobRow.tenant)
    )
    return tuple(
        QueueSummary(
            tier=tier,
            tenant=model.Tenant(tenant),
            pending=pending,
            admitted=admitted,
            oldest_wait_s=None if oldest is None else max(0.0, now - timestamps.to_unix(oldest)),
            unschedulable=unschedulable,
        )
        for tier, tenant, pending, admitted, oldest, unschedulable in rows
    )


async def queued_in_order(session: AsyncSession, *, limit: int = 20_000) -> tuple[JobRecord, ...]:
    """Every queued job in the order the last cycle ranked them (position 1 first; jobs it has
    not ranked yet last, oldest first): what the queue page lists and counts blockers from."""
    rows = await session.execute(
        select(*_RECORD_COLUMNS)
        .where(JobRow.phase == QUEUED)
        .order_by(JobRow.queue_position.asc().nulls_last(), JobRow.submitted_at, JobRow.id)
        .limit(limit)
    )
    return tuple(_record_view(cast(_RecordFields, row)) for row in rows)


@dataclass(frozen=True, slots=True)
class TenantUse:
    """What one tenant holds and waits for in one device class, from the jobs table."""

    tenant: str
    device_class: str
    in_use: int
    borrowed: int
    waiting_jobs: int
    waiting_devices: int


async def tenant_use(session: AsyncSession) -> tuple[TenantUse, ...]:
    holding = JobRow.phase.in_(HOLDING_PHASES)
    queued = JobRow.phase == QUEUED
    held = func.coalesce(JobRow.size, JobRow.replicas) * JobRow.devices_per_replica
    wanted = JobRow.replicas * JobRow.devices_per_replica
    rows = await session.execute(
        select(
            JobRow.tenant,
            JobRow.device_class,
            func.coalesce(func.sum(held).filter(holding), 0),
            func.coalesce(func.sum(JobRow.borrowed).filter(holding), 0),
            func.count().filter(queued),
            func.coalesce(func.sum(wanted).filter(queued), 0),
        )
        .where(JobRow.phase.not_in(FINISHED_PHASES))
        .group_by(JobRow.tenant, JobRow.device_class)
        .order_by(JobRow.tenant, JobRow.device_class)
    )
    return tuple(
        TenantUse(tenant, device_class, int(used), int(borrowed), int(jobs), int(devices))
        for tenant, device_class, used, borrowed, jobs, devices in rows
    )


CHANGE_MARKER = text(
    """
    SELECT (SELECT max(id) FROM events),
           (SELECT max(updated_at) FROM jobs),
           (SELECT count(*) FROM reservations WHERE released_at IS NULL),
           (SELECT sum(hashtext(concat_ws('|', id, queue_position, pending_message,
                                           reserved_start_at, reserved_nodes)))
            FROM jobs WHERE phase = 'Queued')
    """
)


async def change_marker(session: AsyncSession) -> tuple[object, ...]:
    """A value that changes whenever what people see of jobs changes (a history entry, a phase,
    a reservation, a queued job's position, reason or reserved start): one cheap query lets
    live pages learn that something changed without each browser polling every list."""
    row = (await session.execute(CHANGE_MARKER)).one()
    return tuple(row)
