"""The leader's runtime history: which gang endings are runs, and the predictor built on them.

Owns the rule of what counts as a finished run for predictions (rule 5): an attempt that ran
and ended by itself, all replicas succeeded or a replica failed. An eviction, a deletion, a
teardown at startup or for a lost node says nothing about how long the job needs. The
predictor is rebuilt from PostgreSQL whenever this controller becomes leader (a new leader
knows every run its predecessors recorded) and learns each run the moment it is committed.
"""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.kube import lifecycle
from gangq.queue.store import leader, runs, snapshot, timestamps

logger = logging.getLogger(__name__)


def is_own_end(verdict: lifecycle.Verdict, *, was_running: bool, long_running: bool) -> bool:
    """True when the gang's attempt ran to its own end: it was running, its tier ends by
    itself, and every replica succeeded or one failed (never evicted, deleted, timed out at
    startup or lost with its node)."""
    if not was_running or long_running:
        return False
    if verdict.ending is lifecycle.Ending.SUCCEEDED:
        return True
    failed = verdict.ending in (lifecycle.Ending.FAILED, lifecycle.Ending.REQUEUE)
    return failed and verdict.failure == "pod_failed"


def run_of(
    row: snapshot.JobColumns, verdict: lifecycle.Verdict, *, now: float, long_running: bool
) -> runs.Run | None:
    """The run a gang's ending records, or None when the ending is not one (`is_own_end`)."""
    if row.started_at is None:
        return None
    if not is_own_end(verdict, was_running=True, long_running=long_running):
        return None
    started = timestamps.to_unix(row.started_at)
    return runs.Run(
        job_id=row.id,
        job_key=snapshot.key_of(row),
        shape=runs.shape_of(
            tenant=row.tenant,
            tier=row.tier,
            replicas=row.replicas,
            devices_per_replica=row.devices_per_replica,
            family=row.family,
            name=row.name,
        ),
        device_class=row.device_class,
        succeeded=verdict.ending is lifecycle.Ending.SUCCEEDED,
        started_at=started,
        ended_at=max(now, started),
        size=row.size,
    )


class History:
    """The predictor one leader keeps; None until `ensure` loaded it for this leadership."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self.estimator: runs.Estimator | None = None
        self._term: leader.Term | None = None

    async def ensure(self, *, term: leader.Term) -> runs.Estimator:
        """The predictions of this leadership, read from the store when `term` is new."""
        if self.estimator is None or self._term != term:
            async with self.sessions() as session:
                finished = await runs.recent(session)
            self.estimator, self._term = runs.Estimator(runs.predictor_of(finished)), term
            logger.info(
                "runtime predictor loaded: %d recent runs (epoch %d)", len(finished), term.epoch
            )
        return self.estimator

    def learn(self, run: runs.Run) -> None:
        """After the ending committed: the predictor knows the run from the next cycle on."""
        if self.estimator is not None:
            self.estimator.learn(run.finished)
