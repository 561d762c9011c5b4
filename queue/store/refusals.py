"""Jobs refused for their spec: recorded as Failed with the reason, queued again once fixed.

Owns the terminal invalid state: a job whose spec cannot run (a field out of range, a name
Kubernetes would refuse for its pods, no tenant, an unknown tier, a refusal by the API server)
is a Failed row with pending code `invalid` and the reason, no position and no reservation, so
the API explains it like any other job. Editing the spec brings it back to Queued (same uid).
Nothing here decides validity: callers pass the reason.
"""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import explain, model
from gangq.queue.store import jobs, spec, timestamps
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import FAILED, QUEUED, EventKind, JobRow

INVALID = str(explain.ReasonCode.INVALID)


def _is_refused(row: JobRow) -> bool:
    return row.phase == FAILED and row.pending_code == INVALID


def _fill(row: JobRow, job: model.PendingJob) -> None:
    row.tenant, row.tier, row.priority = job.tenant, job.tier, job.priority
    row.replicas, row.devices_per_replica = job.replicas, job.devices_per_replica
    row.min_replicas = job.min_replicas
    row.device_class, row.spec = job.device_class, json.loads(json.dumps(spec.encode(job)))
    row.submitted_at = timestamps.to_datetime(job.submitted_at)
    row.max_runtime_s = None if job.max_runtime_s is None else int(job.max_runtime_s)


async def refuse(
    session: AsyncSession, job: model.PendingJob, *, message: str, at: float, actor: str
) -> bool:
    """Record `job` (its fields as far as they could be read) as Failed for `message`.

    True when something changed: a new refusal, or a refused job refused again for another
    reason. A job already queued or running under this uid is left alone (False).
    """
    namespace, name = jobs.split_key(job.key)
    reason = explain.invalid(message)
    row = await session.scalar(select(JobRow).where(JobRow.uid == job.uid).with_for_update())
    if row is not None:
        if not _is_refused(row) or row.pending_message == reason.message:
            return False
        row.pending_message = reason.message
        row.finished_at = timestamps.to_datetime(at)
    else:
        row = JobRow(uid=job.uid, namespace=namespace, name=name)
        _fill(row, job)
        row.phase, row.finished_at = FAILED, timestamps.to_datetime(at)
        row.pending_code, row.pending_message = INVALID, reason.message
        session.add(row)
        await session.flush()
    await jobs.record_event(
        session, row, kind=EventKind.FAILED, reason=reason.message, at=at, actor=actor
    )
    return True


async def requeue_fixed(
    session: AsyncSession, job: model.PendingJob, *, at: float, actor: str
) -> bool:
    """Queue a refused job again with its corrected spec; False when it is not refused.

    A live job of the same namespace/name (an earlier run still ending) is a conflict.
    """
    jobs.validate(job)
    row = await session.scalar(select(JobRow).where(JobRow.uid == job.uid).with_for_update())
    if row is None or not _is_refused(row):
        return False
    _fill(row, job)
    row.phase, row.finished_at = QUEUED, None
    row.pending_code = row.pending_message = None
    try:
        await session.flush()
    except IntegrityError as error:
        if jobs.LIVE_KEY_INDEX in str(error.orig):
            raise ConflictError(f"a live job {job.key} already exists: {error.orig}") from error
        raise
    await jobs.record_event(
        session,
        row,
        kind=EventKind.REQUEUED,
        reason="spec corrected: queued again",
        at=at,
        actor=actor,
    )
    return True


async def mark_refused(session: AsyncSession, key: str, *, message: str) -> None:
    """The job that just ended Failed (in this transaction) ended for its spec, as the API
    server judged it: its reason says so, and editing the spec queues it again."""
    namespace, name = jobs.split_key(key)
    row = await session.scalar(
        select(JobRow)
        .where(JobRow.namespace == namespace, JobRow.name == name, JobRow.phase == FAILED)
        .order_by(JobRow.id.desc())
        .limit(1)
    )
    if row is not None:
        row.pending_code, row.pending_message = INVALID, explain.invalid(message).message
