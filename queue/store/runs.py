"""Finished runs: the history runtime predictions are made from (rule 5), and the estimates.

Owns the `runs` table (one row per attempt that ran to its own end, written in the transaction
that ends it) and its two bounded reads: the last runs of every shape, for the predictor the
leader builds, and the last runs of one shape, for one job's estimate in the API. `Estimator`
turns a job's columns into its predicted runtime and end with the core's `RuntimePredictor`,
the code path the simulator uses too. Which endings count as runs is the caller's judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import backfill, elastic, model, prediction
from gangq.queue.store import timestamps
from gangq.queue.store.models import FINISHED_PHASES, JobRow, RunRow

WINDOW = 4
"""Runs of one shape a prediction averages: the leader's predictor and the API read as many."""
RECORD = text(
    """
    INSERT INTO runs (job_id, job_key, tenant, tier, replicas, devices_per_replica, family,
                      device_class, succeeded, started_at, ended_at, runtime_s)
    VALUES (:job_id, :job_key, :tenant, :tier, :replicas, :devices_per_replica, :family,
            :device_class, :succeeded, :started_at, :ended_at, :runtime_s)
    ON CONFLICT (job_id, started_at) DO NOTHING
    """
)
_UNKNOWN = object()
_SHAPE = (RunRow.tenant, RunRow.tier, RunRow.replicas, RunRow.devices_per_replica, RunRow.family)


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt that ran to its own end, as it is recorded."""

    job_id: int | None
    """None for a run imported from elsewhere (no queue row of its own)."""
    job_key: str
    shape: prediction.RunShape
    device_class: str
    succeeded: bool
    started_at: float
    ended_at: float
    size: int | None = None
    """The replicas it ran at (an elastic job may run below `shape.replicas`); None: at
    `shape.replicas`."""

    @property
    def runtime_s(self) -> float:
        """How long the run takes at `shape.replicas`, the size predictions are made at."""
        elapsed = self.ended_at - self.started_at
        if self.size is None:
            return elapsed
        return elastic.work_of(elapsed, size=self.size, replicas=self.shape.replicas)

    @property
    def finished(self) -> prediction.FinishedRun:
        return prediction.FinishedRun(
            shape=self.shape, runtime_s=self.runtime_s, ended_at=self.ended_at
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """What the API shows of a job's prediction; None where there is nothing to say."""

    predicted_runtime_s: float | None
    predicted_end_at: float | None
    """For a gang holding devices: when it is expected to free them."""
    lost_work_device_s: float | None
    """For a gang holding devices: the work an eviction now would destroy (rule 6)."""
    last_checkpoint_at: float | None
    checkpoint_interval_s: float | None


def shape_of(
    *,
    tenant: str,
    tier: str,
    replicas: int,
    devices_per_replica: int,
    family: str | None,
    name: str,
) -> prediction.RunShape:
    """A stored job's shape; a job without a family label is known by its name (rule 5)."""
    return prediction.RunShape(
        tenant=tenant,
        tier=tier,
        replicas=replicas,
        devices_per_replica=devices_per_replica,
        family=family or prediction.family_of(name),
    )


async def record(session: AsyncSession, finished: Sequence[Run]) -> None:
    """Keep finished attempts, a step's endings in one round trip; recording the same attempt
    again changes nothing."""
    if not finished:
        return
    await session.execute(
        RECORD,
        [
            {
                "job_id": run.job_id,
                "job_key": run.job_key,
                "tenant": run.shape.tenant,
                "tier": run.shape.tier,
                "replicas": run.shape.replicas,
                "devices_per_replica": run.shape.devices_per_replica,
                "family": run.shape.family,
                "device_class": run.device_class,
                "succeeded": run.succeeded,
                "started_at": timestamps.to_datetime(run.started_at),
                "ended_at": timestamps.to_datetime(run.ended_at),
                "runtime_s": run.runtime_s,
            }
            for run in finished
        ],
    )


def _finished(row: Row[*tuple[Any, ...]]) -> prediction.FinishedRun:
    shape = prediction.RunShape(
        tenant=row.tenant,
        tier=row.tier,
        replicas=row.replicas,
        devices_per_replica=row.devices_per_replica,
        family=row.family,
    )
    return prediction.FinishedRun(
        shape=shape, runtime_s=row.runtime_s, ended_at=timestamps.to_unix(row.ended_at)
    )


async def recent(session: AsyncSession, *, per_shape: int = WINDOW) -> list[prediction.FinishedRun]:
    """The last `per_shape` runs of every shape, oldest first (the order a predictor learns)."""
    ranked = select(
        *_SHAPE,
        RunRow.runtime_s,
        RunRow.ended_at,
        func.row_number()
        .over(partition_by=_SHAPE, order_by=(RunRow.ended_at.desc(), RunRow.id.desc()))
        .label("recency"),
    ).subquery()
    rows = await session.execute(
        select(ranked).where(ranked.c.recency <= per_shape).order_by(ranked.c.ended_at)
    )
    return [_finished(row) for row in rows]


async def recent_of(
    session: AsyncSession, shape: prediction.RunShape, *, limit: int = WINDOW
) -> list[prediction.FinishedRun]:
    """The last `limit` runs of one shape (read from `ix_runs_shape_recent` alone)."""
    rows = await session.execute(
        select(*_SHAPE, RunRow.runtime_s, RunRow.ended_at)
        .where(
            RunRow.tenant == shape.tenant,
            RunRow.tier == shape.tier,
            RunRow.replicas == shape.replicas,
            RunRow.devices_per_replica == shape.devices_per_replica,
            RunRow.family == shape.family,
        )
        .order_by(RunRow.ended_at.desc())
        .limit(limit)
    )
    return [_finished(row) for row in rows]


class Estimator:
    """Predictions for the jobs of every cycle, one per distinct shape and bound, kept until the
    predictor learns a run: a queue of thousands of jobs costs dictionary lookups per cycle."""

    FAMILIES_KEPT = 100_000
    """Names whose family is remembered; past it the memory starts over (names of jobs
    long gone would otherwise pile up)."""

    def __init__(self, predictor: prediction.RuntimePredictor) -> None:
        self.predictor = predictor
        self._families: dict[str, str] = {}
        self._runtimes: dict[tuple[object, ...], float | None] = {}
        """Predictions by the job's columns (name included: its family may come from it)."""

    def learn(self, run: prediction.FinishedRun) -> None:
        """A run ended: the predictor knows it and every prediction is made again."""
        self.predictor.record(run)
        self._runtimes.clear()

    def runtime_s(
        self,
        *,
        tenant: str,
        tier: str,
        replicas: int,
        devices_per_replica: int,
        family: str | None,
        name: str,
        max_runtime_s: float | None,
    ) -> float | None:
        """The predicted runtime, at most `max_runtime_s`; None when neither is known."""
        key = (tenant, tier, replicas, devices_per_replica, family, name, max_runtime_s)
        found = self._runtimes.get(key, _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        if family is None:
            family = self._families.get(name)
            if family is None:
                if len(self._families) >= self.FAMILIES_KEPT:
                    self._families.clear()
                family = self._families[name] = prediction.family_of(name)
        shape = prediction.RunShape(tenant, tier, replicas, devices_per_replica, family)
        found = self._runtimes[key] = self.predictor.predict(shape, max_runtime_s=max_runtime_s)
        return found


async def estimate(
    session: AsyncSession,
    key: model.JobKey,
    *,
    placement: tuple[model.ReplicaPlacement, ...],
    now: float,
) -> Estimate | None:
    """One job's prediction as the leader computes it (same window, same code path), with the
    work an eviction would destroy now when it holds `placement`; None for an unknown job."""
    namespace, _, name = key.partition("/")
    row = (
        await session.execute(
            select(
                JobRow.tenant,
                JobRow.tier,
                JobRow.replicas,
                JobRow.devices_per_replica,
                JobRow.family,
                JobRow.max_runtime_s,
                JobRow.started_at,
                JobRow.admitted_at,
                JobRow.submitted_at,
                JobRow.checkpoint_interval_s,
                JobRow.last_checkpoint_at,
                JobRow.phase,
                JobRow.uid,
                JobRow.device_class,
                JobRow.priority,
                JobRow.size,
            )
            .where(JobRow.namespace == namespace, JobRow.name == name)
            .order_by(JobRow.phase.in_(FINISHED_PHASES), JobRow.id.desc())
            .limit(1)
        )
    ).first()
    if row is None:
        return None
    shape = shape_of(
        tenant=row.tenant,
        tier=row.tier,
        replicas=row.replicas,
        devices_per_replica=row.devices_per_replica,
        family=row.family,
        name=name,
    )
    bound = None if row.max_runtime_s is None else float(row.max_runtime_s)
    predictor = prediction.RuntimePredictor(await recent_of(session, shape), window=WINDOW)
    predicted = predictor.predict(shape, max_runtime_s=bound)
    interval = None if row.checkpoint_interval_s is None else float(row.checkpoint_interval_s)
    checkpoint = timestamps.optional_unix(row.last_checkpoint_at)
    if not placement:
        return Estimate(predicted, None, None, checkpoint, interval)
    if predicted is not None:
        # made at the job's maximum: an elastic job that started smaller takes longer
        size = row.size or row.replicas
        predicted = elastic.runtime_at(predicted, size=size, replicas=row.replicas)
        predicted = predicted if bound is None else min(predicted, bound)
    started = timestamps.to_unix(row.started_at or row.admitted_at or row.submitted_at)
    gang = model.RunningJob(
        key=key,
        uid=row.uid,
        tenant=model.Tenant(row.tenant),
        tier=row.tier,
        priority=row.priority,
        device_class=row.device_class,
        placement=placement,
        started_at=started,
        max_runtime_s=bound,
        predicted_end_at=None if predicted is None else started + predicted,
        last_checkpoint_at=checkpoint,
        checkpoint_interval_s=interval,
    )
    return Estimate(
        predicted_runtime_s=predicted,
        predicted_end_at=backfill.expected_end(gang, now=now),
        lost_work_device_s=gang.lost_work_device_s(now),
        last_checkpoint_at=checkpoint,
        checkpoint_interval_s=interval,
    )


def predictor_of(runs: Sequence[prediction.FinishedRun]) -> prediction.RuntimePredictor:
    """The predictor the leader keeps, learning from `runs` (oldest first)."""
    return prediction.RuntimePredictor(runs, window=WINDOW)
