"""How the simulator shows its jobs to a policy: the core's `RunningJob` and `PendingJob`.

Owns the translation only, as the store's snapshot does for the controller: a shrinking gang
is the two parts `elastic.split` makes of it, and a running gang that may grow is the job at
its maximum, as it would wait in the queue.
"""

from __future__ import annotations

from gangq.queue.core import elastic
from gangq.queue.core.model import PendingJob, RunningJob
from gangq.queue.sim import checkpoint
from gangq.queue.sim.outcome import JobRecord
from gangq.queue.sim.trace import TraceJob


def running(record: JobRecord, *, device_class: str, now: float) -> tuple[RunningJob, ...]:
    """The gang `record` holds devices for; a shrinking one as the part that stays and the
    part that leaves (its devices coming free, as an evicting gang's)."""
    job = record.job
    gang = RunningJob(
        key=job.key,
        uid=job.key,
        tenant=job.tenant,
        tier=job.tier,
        priority=job.priority,
        device_class=device_class,
        placement=tuple(record.placement[i] for i in sorted(record.placement)),
        started_at=record.held_since or 0.0,
        max_runtime_s=job.max_runtime_s,
        borrowed=record.borrowed,
        is_evicting=record.evicting_since is not None,
        evicting_by=record.evicting_by,
        submitted_at=job.arrival_s,
        predicted_end_at=record.predicted_end,
        last_checkpoint_at=checkpoint.last_at(record, now=now),
        checkpoint_interval_s=job.checkpoint_interval_s,
        checkpoint_grace_s=job.checkpoint_grace_s,
        restart_s=job.restart_s,
        lost_before_device_s=record.lost_device_s,
        min_replicas=job.min_replicas,
    )
    if record.shrinking_to is None:
        return (gang,)
    return elastic.split(gang, record.shrinking_to)


def is_growable(record: JobRecord) -> bool:
    """A running elastic gang below its maximum, neither evicting nor shrinking (rule 13)."""
    return (
        record.job.min_replicas is not None
        and record.started_at is not None
        and record.size is not None
        and record.size < record.job.replicas
        and record.evicting_since is None
        and record.shrinking_to is None
    )


def pending(
    job: TraceJob,
    *,
    device_class: str,
    selectors: tuple[str, ...],
    predicted_runtime_s: float | None,
    queued_at: float | None,
    preempted_at: float | None = None,
) -> PendingJob:
    """The job as a gang of `replicas` waiting for devices (or for more of them, to grow)."""
    return PendingJob(
        key=job.key,
        uid=job.key,
        tenant=job.tenant,
        tier=job.tier,
        priority=job.priority,
        replicas=job.replicas,
        devices_per_replica=job.devices_per_replica,
        device_class=device_class,
        selectors=selectors,
        constraints=job.constraints,
        topology=job.topology,
        submitted_at=job.arrival_s,
        max_runtime_s=job.max_runtime_s,
        predicted_runtime_s=predicted_runtime_s,
        queued_at=queued_at,
        preempted_at=preempted_at,
        checkpoint_interval_s=job.checkpoint_interval_s,
        checkpoint_grace_s=job.checkpoint_grace_s,
        restart_s=job.restart_s,
        min_replicas=job.min_replicas,
    )
