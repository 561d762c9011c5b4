"""Elastic gangs (rule 13): the size a job that may run at any size from `elastic.minReplicas`
to `replicas` starts at, when a running one grows, what a shrink leaves, and how a runtime
follows the size.

Owns the size rules and the runtime model both the cycle and the simulator use. It places and
admits nothing: the cycle tells it which sizes fit now and when the full size would start, and
admits, grows or shrinks a gang all-or-nothing as it does any other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

from gangq.queue.core.model import PendingJob, RunningJob

SCALING_EFFICIENCY = 1.0
"""The share of its work per device-second an elastic job keeps below its maximum size: 1.0,
linear scaling. Its work is then device-seconds, the same at every size: a run that takes T at
`replicas` takes T x replicas / s at size s. Runtime predictions are made at the maximum (runs
are recorded as if they ran there), so the size rule and the simulator both scale them with
this model."""


def runtime_at(runtime_s: float, *, size: int, replicas: int) -> float:
    """How long a run that takes `runtime_s` at its maximum `replicas` takes at `size`."""
    if size >= replicas:
        return runtime_s
    return runtime_s * replicas / (size * SCALING_EFFICIENCY)


def work_of(elapsed_s: float, *, size: int, replicas: int) -> float:
    """How much of a run at its maximum `replicas` `elapsed_s` at `size` does (the inverse
    of `runtime_at`): what a run is recorded as for predictions."""
    if size >= replicas:
        return elapsed_s
    return elapsed_s * size * SCALING_EFFICIENCY / replicas


def at_size(job: PendingJob, size: int) -> PendingJob:
    """The job as a gang of `size` replicas: its predicted runtime (made at its maximum) is
    scaled to that size and, as every prediction, capped by its bound."""
    if size == job.replicas:
        return job
    predicted = job.predicted_runtime_s
    if predicted is not None:
        predicted = runtime_at(predicted, size=size, replicas=job.replicas)
        if job.max_runtime_s is not None:
            predicted = min(predicted, job.max_runtime_s)
    return dataclasses.replace(job, replicas=size, predicted_runtime_s=predicted)


def smallest(job: PendingJob) -> PendingJob:
    """The job at the least it may run at: whether it can ever run is judged on this."""
    return job if job.min_replicas is None else at_size(job, job.min_replicas)


def _least_within_bound(job: PendingJob) -> int:
    """The smallest size the job may start at whose predicted run ends within its bound (the
    maximum always does: its prediction is capped by the bound). A prediction at the bound
    says no more than the bound (it is what a job without history is predicted to run)."""
    low = job.min_replicas or job.replicas
    bound, runtime = job.max_runtime_s, job.predicted_runtime_s
    if bound is None or runtime is None or runtime >= bound:
        return low
    return next(
        (
            size
            for size in range(low, job.replicas)
            if runtime_at(runtime, size=size, replicas=job.replicas) <= bound
        ),
        job.replicas,
    )


class Waiting(NamedTuple):
    """A smaller size fits now, but the full size is predicted to end sooner: the predicted
    ends of both, which the job's reason tells."""

    size: int
    """The largest size that fits now."""
    small_end_at: float
    full_end_at: float


class Choice(NamedTuple):
    """The size the job is decided at; `waiting` is set when it waits for its maximum
    although a smaller size fits now."""

    size: int
    waiting: Waiting | None = None


def start_size(
    job: PendingJob,
    *,
    fits: Callable[[int], bool],
    full_start: Callable[[], float | None],
    long_running: bool,
    now: float,
) -> Choice:
    """The size an elastic job is decided at this cycle, by these rules in order:

    0. only sizes whose predicted runtime (`runtime_at`, from the prediction at the maximum)
       ends within `max_runtime_s` count: `maxRuntimeSeconds` bounds wall time, and a smaller
       size predicted to need longer would be stopped before its work is done. Without a
       prediction below the bound every size counts: the bound is a limit, not an estimate;
    1. the largest of those sizes, from `replicas` down, that `fits` now; when none fits,
       the smallest of them (it waits as a gang of that size: what it may evict, or its
       backfill reservation when it heads its tier, is for that size);
    2. when that is the maximum, the maximum;
    3. a job that never ends by itself (long-running tier), or whose runtime is known neither
       by prediction nor by `max_runtime_s`, starts at the largest size that fits;
    4. otherwise that size s starts now when its predicted end, now + the runtime at the
       maximum x replicas / s (`runtime_at`, device-time conserved), is no later than the
       maximum's: its predicted earliest start (`full_start`, the search a backfill
       reservation makes) plus the runtime at the maximum; and also when the maximum has no
       predicted start. Else the job waits for its maximum.
    """
    low = _least_within_bound(job)
    runtime = job.predicted_runtime_s if job.predicted_runtime_s is not None else job.max_runtime_s
    size = next((s for s in range(job.replicas, low - 1, -1) if fits(s)), None)
    if size is None:
        return Choice(low)
    if size == job.replicas:
        return Choice(size)
    if long_running or runtime is None:
        return Choice(size)
    start = full_start()
    if start is None:
        return Choice(size)
    small_end = now + runtime_at(runtime, size=size, replicas=job.replicas)
    full_end = max(start, now) + runtime
    if small_end <= full_end:
        return Choice(size)
    return Choice(job.replicas, Waiting(size=size, small_end_at=small_end, full_end_at=full_end))


def split(gang: RunningJob, keep: int) -> tuple[RunningJob, RunningJob]:
    """A shrinking gang as the part that stays (replicas below `keep`, still running) and the
    part that leaves (its devices coming free, as an evicting gang's do). The leaving part
    takes the gang's borrowed devices first: a shrink returns borrowed use before nominal."""
    leaving = tuple(p for p in gang.placement if p.replica >= keep)
    leaving_count = sum(len(p.devices) for p in leaving)
    given_back = min(gang.borrowed, leaving_count)
    kept = dataclasses.replace(
        gang,
        placement=tuple(p for p in gang.placement if p.replica < keep),
        borrowed=gang.borrowed - given_back,
        is_evicting=False,
        evicting_by=None,
    )
    return kept, dataclasses.replace(gang, placement=leaving, borrowed=given_back, is_evicting=True)


def grown_rest_s(gang: RunningJob, add: int, *, rest_s: float, now: float) -> float:
    """How long the gang runs once grown by `add` replicas, `rest_s` being what it has left at
    its size: the whole gang re-forms from its last checkpoint (the work since is done again)
    and restarts, then its work, device-time, is shared by more replicas."""
    size = gang.size
    work = (rest_s + gang.unsaved_s(now)) * size
    return work / ((size + add) * SCALING_EFFICIENCY) + gang.restart_s


def grow_pays(gang: RunningJob, add: int, *, rest_s: float, now: float, long_running: bool) -> bool:
    """A grow pays when the gang is predicted to end sooner grown than at its size, the
    re-forming counted (`grown_rest_s`). A gang whose end is not known (no prediction and no
    bound) grows only when re-forming costs it little: it serves (a long-running tier, whose
    restart loses no run) or declares a checkpoint interval (it loses at most one); a gang
    without checkpoints would lose its whole run for a gain nobody can predict."""
    if math.isinf(rest_s):
        return long_running or gang.checkpoint_interval_s is not None
    return grown_rest_s(gang, add, rest_s=rest_s, now=now) < rest_s


def grow_cost_device_s(
    gang: RunningJob, added_devices: int, *, now: float, long_running: bool
) -> float:
    """What re-forming the gang to take `added_devices` more destroys: the work since its last
    checkpoint on every device it holds (none for a tier that serves: its restart loses no
    run), and the restart of every device of the grown gang."""
    redone = 0.0 if long_running else gang.device_count * gang.unsaved_s(now)
    return redone + gang.restart_s * (gang.device_count + added_devices)


def addition(
    job: PendingJob, gang: RunningJob, add: int, *, rest_s: float, now: float
) -> PendingJob:
    """The `add` replicas a grow gives the running `gang` of `job` (the job at its maximum),
    as a gang the cycle places like any other: it runs as long as the grown gang, within the
    gang's bound, and has waited since the gang started at its size (the idle time a grow
    weighs counts from there)."""
    bound = None if gang.ends_at is None else max(gang.ends_at - now, 0.0)
    predicted = None if math.isinf(rest_s) else grown_rest_s(gang, add, rest_s=rest_s, now=now)
    if predicted is not None and bound is not None:
        predicted = min(predicted, bound)
    return dataclasses.replace(
        job,
        replicas=add,
        min_replicas=None,
        predicted_runtime_s=predicted,
        max_runtime_s=bound,
        queued_at=gang.started_at,
    )
