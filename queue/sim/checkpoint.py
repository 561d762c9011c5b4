"""What a running gang has saved: its checkpoints, and what re-forming from the last one costs.

Owns the arithmetic shared by every restart of a gang from its checkpoint: an eviction (it
resumes after it is admitted again) and a resize of an elastic gang (it re-forms at once at its
new size). A run of a record starts at `started_at`, restarts for `restart_s` (no work), then
works and saves every `checkpoint_interval_s`.
"""

from __future__ import annotations

from typing import NamedTuple

from gangq.queue.core import elastic
from gangq.queue.sim.outcome import JobRecord


class Settled(NamedTuple):
    """A run brought back to its last checkpoint: the work it keeps and the device-time lost."""

    progress_s: float
    """Work saved by the run, at the job's `replicas` (the unit of `JobRecord.progress_s`)."""
    lost_device_s: float
    """All its devices x the time since the last checkpoint (or since its start)."""
    restarting_device_s: float
    """The part of `lost_device_s` the run spent restarting: lost to why it last restarted."""


def checkpointed(ran_s: float, *, interval: float | None) -> float:
    """Work saved by a run of `ran_s` seconds that checkpoints every `interval` seconds."""
    if interval is None or ran_s <= 0:
        return 0.0
    return (ran_s // interval) * interval


def saved_s(record: JobRecord, *, now: float) -> float:
    """Seconds of the current run's work (after its restart) its checkpoints hold at `now`: a
    victim that answered a checkpoint request holds its work up to the request."""
    if record.started_at is None:
        return 0.0
    resumed = record.started_at + record.restart_s
    if record.saved_on_request_at is not None:
        return max(record.saved_on_request_at - resumed, 0.0)
    return checkpointed(now - resumed, interval=record.job.checkpoint_interval_s)


def last_at(record: JobRecord, *, now: float) -> float | None:
    """Since when an eviction of the running gang would lose its run: its last periodic
    checkpoint, else the start of its run when that came after its devices did (a resize
    re-formed it then from what it had saved); None: since it got its devices."""
    if record.started_at is None:
        return None
    resumed = record.started_at + record.restart_s
    saved = checkpointed(now - resumed, interval=record.job.checkpoint_interval_s)
    if saved > 0:
        return resumed + saved
    held_since = record.held_since
    return record.started_at if held_since is not None and record.started_at > held_since else None


def settle(record: JobRecord, *, now: float) -> Settled:
    """What the run of `record` keeps and loses when its gang re-forms from its last checkpoint
    at `now`: its work at its current size counts at the job's `replicas` (`elastic.work_of`)."""
    if record.started_at is None:
        return Settled(0.0, 0.0, 0.0)
    ran = now - record.started_at
    saved = saved_s(record, now=now)
    size = record.size or record.job.replicas
    progress = elastic.work_of(saved, size=size, replicas=record.job.replicas)
    devices = record.held_devices
    restarting = devices * min(record.restart_s, ran - saved)
    return Settled(progress, devices * (ran - saved), restarting)
