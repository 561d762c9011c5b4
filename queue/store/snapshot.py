"""The store's half of a cycle's input: quotas, gangs holding devices and the queue.

Owns reading those rows (plain columns, no ORM objects: this runs every cycle over the whole
queue) and turning them into core types. A job whose stored spec cannot be read is set aside
with an `invalid` reason instead of stopping the cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from sqlalchemy import Text, cast
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import elastic, model
from gangq.queue.core.device import DeviceId
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import liverows, reservations, runs, serving, spec, tenants, timestamps
from gangq.queue.store.models import JobRow

JobColumns: TypeAlias = Any
"""One job's row as the cycle reads it: a named tuple of `_COLUMNS` (`bulk.column_rows`)."""

_JOB_COLUMNS = (
    JobRow.id,
    JobRow.namespace,
    JobRow.name,
    JobRow.uid,
    JobRow.tenant,
    JobRow.tier,
    JobRow.priority,
    JobRow.replicas,
    JobRow.devices_per_replica,
    JobRow.device_class,
    cast(JobRow.spec, Text).label("spec"),
    JobRow.submitted_at,
    JobRow.max_runtime_s,
    JobRow.family,
    JobRow.checkpoint_interval_s,
    JobRow.queued_at,
    JobRow.min_replicas,
    JobRow.preempted_at,
)
"""What a queued job's core view is made of (with its predicted runtime)."""
_RUN_COLUMNS = (
    JobRow.admitted_at,
    JobRow.started_at,
    JobRow.borrowed,
    JobRow.evicting,
    JobRow.evict_by,
    JobRow.last_checkpoint_at,
    JobRow.lost_device_s,
    JobRow.size,
    JobRow.shrink_to,
)
"""What a running job's core view is made of besides (with its placement)."""
_COLUMNS = (
    *_JOB_COLUMNS,
    *_RUN_COLUMNS,
    JobRow.pending_code,
    JobRow.pending_message,
    JobRow.queue_position,
    JobRow.reserved_start_at,
    JobRow.reserved_nodes,
    JobRow.checkpoint_requested_at,
    JobRow.evicted_for,
    JobRow.grown_from,
)
"""The columns the cycle reads; the last ones are what it stored for a queued job, which
change with every move of the queue and make no part of a core view."""
_LIVE_JOBS, _JOBS_WRITTEN = liverows.job_selects((*_COLUMNS, JobRow.phase, JobRow.not_before))
"""What `liverows` keeps: the cycle's columns, and what says whether a row is queued now."""
_QUEUED_VIEW = slice(0, len(_JOB_COLUMNS))
_RUNNING_VIEW = slice(0, len(_JOB_COLUMNS) + len(_RUN_COLUMNS))


@dataclass(frozen=True, slots=True)
class Loaded:
    """A snapshot plus what the cycle's writes need: row ids and the values stored before."""

    snapshot: model.Snapshot
    queued: Sequence[JobColumns]
    pending: dict[model.JobKey, JobColumns]
    """The readable queued rows by key (the ones the core saw)."""
    holding: dict[model.JobKey, JobColumns]
    unreadable: dict[int, str]
    """Job id -> message of an `invalid` reason for a stored spec that cannot be read."""


def key_of(row: JobColumns) -> model.JobKey:
    return model.JobKey(f"{row.namespace}/{row.name}")


class SpecMemo(dict[str, spec.JobSpec]):
    """Parsed specs by their JSON text: jobs from one template share one parse per cycle."""

    def parse(self, text: str) -> spec.JobSpec:
        found = self.get(text)
        if found is None:
            found = self[text] = spec.parse(text)
        return found


def _predicted_runtime_s(row: JobColumns, estimator: runs.Estimator | None) -> float | None:
    if estimator is None:
        return None
    return estimator.runtime_s(
        tenant=row.tenant,
        tier=row.tier,
        replicas=row.replicas,
        devices_per_replica=row.devices_per_replica,
        family=row.family,
        name=row.name,
        max_runtime_s=None if row.max_runtime_s is None else float(row.max_runtime_s),
    )


def pending_job(
    row: JobColumns, *, specs: SpecMemo, estimator: runs.Estimator | None = None
) -> model.PendingJob:
    stored = specs.parse(row.spec)
    return model.PendingJob(
        key=key_of(row),
        uid=row.uid,
        tenant=model.Tenant(row.tenant),
        tier=row.tier,
        priority=row.priority,
        replicas=row.replicas,
        devices_per_replica=row.devices_per_replica,
        device_class=row.device_class,
        selectors=stored.selectors,
        constraints=stored.constraints,
        capacity_requests=stored.capacity_requests,
        topology=stored.topology,
        pod=stored.pod,
        submitted_at=timestamps.to_unix(row.submitted_at),
        max_runtime_s=None if row.max_runtime_s is None else float(row.max_runtime_s),
        predicted_runtime_s=_predicted_runtime_s(row, estimator),
        checkpoint_interval_s=(
            None if row.checkpoint_interval_s is None else float(row.checkpoint_interval_s)
        ),
        restart_s=stored.restart_s,
        checkpoint_grace_s=stored.checkpoint_grace_s,
        queued_at=timestamps.optional_unix(row.queued_at),
        min_replicas=row.min_replicas,
        preempted_at=timestamps.optional_unix(row.preempted_at),
    )


def running_job(
    row: JobColumns,
    placement: tuple[model.ReplicaPlacement, ...],
    *,
    specs: SpecMemo,
    estimator: runs.Estimator | None = None,
) -> model.RunningJob:
    """A gang holding devices; with an `estimator`, its predicted end (rule 5)."""
    started = timestamps.to_unix(row.started_at or row.admitted_at or row.submitted_at)
    bound = None if row.max_runtime_s is None else float(row.max_runtime_s)
    predicted = _predicted_runtime_s(row, estimator)
    # the first prediction: the core lengthens it while the gang outlives it (and says so);
    # made at the job's maximum, it takes longer at the size an elastic job started at
    predicted_end = None
    if predicted is not None:
        size = row.size or row.replicas
        predicted_end = started + elastic.runtime_at(predicted, size=size, replicas=row.replicas)
    stored = specs.parse(row.spec)
    return model.RunningJob(
        key=key_of(row),
        uid=row.uid,
        tenant=model.Tenant(row.tenant),
        tier=row.tier,
        priority=row.priority,
        device_class=row.device_class,
        placement=placement,
        started_at=started,
        max_runtime_s=bound,
        borrowed=row.borrowed,
        is_evicting=row.evicting,
        evicting_by=timestamps.optional_unix(row.evict_by),
        pod=stored.pod,
        submitted_at=timestamps.to_unix(row.submitted_at),
        predicted_end_at=predicted_end,
        last_checkpoint_at=timestamps.optional_unix(row.last_checkpoint_at),
        checkpoint_interval_s=(
            None if row.checkpoint_interval_s is None else float(row.checkpoint_interval_s)
        ),
        checkpoint_grace_s=stored.checkpoint_grace_s,
        restart_s=stored.restart_s,
        lost_before_device_s=float(row.lost_device_s),
        min_replicas=row.min_replicas,
    )


def running_parts(
    row: JobColumns,
    placement: tuple[model.ReplicaPlacement, ...],
    *,
    specs: SpecMemo,
    estimator: runs.Estimator | None = None,
) -> tuple[model.RunningJob, ...]:
    """The core's view of a gang holding devices: one job, or a shrinking gang's two parts
    (rule 13): the replicas it keeps, running, and the ones leaving, evicting."""
    job = running_job(row, placement, specs=specs, estimator=estimator)
    if row.evicting and row.shrink_to is not None:
        return elastic.split(job, row.shrink_to)
    return (job,)


class Views:
    """What one cycle keeps for the next, so that a cycle over a long queue costs what
    changed: the live job and reservation rows (`liverows`: only the rows written since are
    read); the core views of the jobs by id (only those whose columns, prediction or
    placement changed are rebuilt); and, read since the last cycle, when each device last
    came free (`reservations.ReleaseLog`) and when the serving tiers were admitted
    (`serving.ServingLog`). A `load` without it reads and builds everything afresh."""

    def __init__(self) -> None:
        self.rows = liverows.LiveRows(_LIVE_JOBS, _JOBS_WRITTEN)
        self.releases = reservations.ReleaseLog()
        self.serving = serving.ServingLog()
        self._pending: dict[int, tuple[JobColumns, float | None, model.PendingJob]] = {}
        self._running: dict[int, tuple[JobColumns, object, tuple[model.RunningJob, ...]]] = {}

    def build(
        self,
        queued: Sequence[JobColumns],
        holding: Sequence[JobColumns],
        placements: dict[int, tuple[model.ReplicaPlacement, ...]],
        *,
        estimator: runs.Estimator | None,
    ) -> tuple[
        list[tuple[JobColumns, model.PendingJob]], dict[int, str], tuple[model.RunningJob, ...]
    ]:
        """The readable queued rows with their views, the ids of the unreadable ones with
        why, and the running jobs' views."""
        specs = SpecMemo()
        pending: list[tuple[JobColumns, model.PendingJob]] = []
        unreadable: dict[int, str] = {}
        kept_pending: dict[int, tuple[JobColumns, float | None, model.PendingJob]] = {}
        for row in queued:
            predicted = _predicted_runtime_s(row, estimator)
            known = self._pending.get(row.id)
            if known is None or known[1] != predicted or not _alike(known[0], row, _QUEUED_VIEW):
                try:
                    job = pending_job(row, specs=specs, estimator=estimator)
                except InvalidInputError as error:
                    unreadable[row.id] = f"invalid: job {key_of(row)} cannot be read: {error}"
                    continue
            else:
                job = known[2]
            kept_pending[row.id] = (row, predicted, job)
            pending.append((row, job))
        kept_running: dict[int, tuple[JobColumns, object, tuple[model.RunningJob, ...]]] = {}
        for row in holding:
            placement = placements.get(row.id, ())
            inputs = (placement, _predicted_runtime_s(row, estimator))
            found = self._running.get(row.id)
            if found is None or found[1] != inputs or not _alike(found[0], row, _RUNNING_VIEW):
                parts = running_parts(row, placement, specs=specs, estimator=estimator)
            else:
                parts = found[2]
            kept_running[row.id] = (row, inputs, parts)
        self._pending, self._running = kept_pending, kept_running
        running = tuple(job for found in kept_running.values() for job in found[2])
        return pending, unreadable, running


def _alike(known: JobColumns, row: JobColumns, view: slice) -> bool:
    """The columns a view is made of are the same: the same row object, as the live rows
    keep it while nobody writes it, or equal values."""
    return known is row or known[view] == row[view]


def is_growable(row: JobColumns) -> bool:
    """A running elastic gang below its maximum that nothing else resizes or ends now: its
    pods all started (a gang still being built is not grown under its release), neither
    evicting nor shrinking, and no grow of it under way (rule 13)."""
    return (
        row.started_at is not None
        and row.min_replicas is not None
        and row.size is not None
        and row.size < row.replicas
        and not row.evicting
        and row.shrink_to is None
        and row.grown_from is None
    )


def growable(
    holding: Sequence[JobColumns], *, estimator: runs.Estimator | None
) -> tuple[model.PendingJob, ...]:
    """`Snapshot.growable`: each growable gang as its job at its maximum, the view a queued
    row of it gets. A stored spec that cannot be read leaves the gang at its size: it runs,
    and only its growth would need the spec."""
    specs = SpecMemo()
    found = []
    for row in holding:
        if not is_growable(row):
            continue
        try:
            found.append(pending_job(row, specs=specs, estimator=estimator))
        except InvalidInputError:
            continue
    return tuple(found)


def _idle_from(
    *,
    pending: Sequence[model.PendingJob],
    growable: Sequence[model.PendingJob],
    running: Sequence[model.RunningJob],
) -> float | None:
    """The earliest instant a cycle counts idle devices from: a queued job's wait since it
    queued or last evicted (`PendingJob.paying_since`), or the start of a growable gang at
    its size (a grow weighs the idle time of the devices it would add since then); None when
    no one weighs idle time."""
    grows = {job.key for job in growable}
    instants = [job.paying_since for job in pending]
    instants += [gang.started_at for gang in running if gang.key in grows]
    return min(instants, default=None)


async def load(
    session: AsyncSession,
    inventory: model.Inventory,
    *,
    now: float,
    estimator: runs.Estimator | None = None,
    views: Views | None = None,
    policy: model.Policy | None = None,
    held_back: Collection[str] = (),
) -> Loaded:
    """The cycle's input; with an `estimator`, jobs carry predicted runtimes and ends (rule 5).
    `views` keeps the core views from the last cycle (see `Views`); with a `policy` that
    forecasts serving scale-ups, the snapshot carries the admissions they are learned from.
    Queued rows whose uid is in `held_back` stay out of the snapshot."""
    quotas = await tenants.all_quotas(session)
    kept = views or Views()
    await kept.rows.read(session)
    holding = kept.rows.holding()
    placements = kept.rows.placements()
    queued = kept.rows.queued(at=timestamps.to_datetime(now))
    if held_back:
        queued = [row for row in queued if row.uid not in held_back]
    pending, unreadable, running = kept.build(queued, holding, placements, estimator=estimator)
    grows = growable(holding, estimator=estimator)
    free_since: Mapping[DeviceId, float] = {}
    since = _idle_from(pending=[job for _, job in pending], growable=grows, running=running)
    if since is not None:
        free_since = await kept.releases.read(session, floor=since)
    starts: tuple[model.ServingStart, ...] = ()
    if policy is not None and policy.serving_forecast_days:
        tiers = [tier.name for tier in policy.tiers if tier.always_preempts]
        starts = await kept.serving.read(
            session, tiers=tiers, days=policy.serving_forecast_days, now=now
        )
    return Loaded(
        snapshot=model.Snapshot(
            inventory=inventory,
            quotas=quotas,
            running=running,
            pending=tuple(job for _, job in pending),
            growable=grows,
            serving_starts=starts,
            free_since=free_since,
        ),
        queued=queued,
        holding={key_of(row): row for row in holding},
        pending={job.key: row for row, job in pending},
        unreadable=unreadable,
    )
