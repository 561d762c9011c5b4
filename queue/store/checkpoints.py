"""What a job tells about its own run: family, checkpoint interval, last saved checkpoint.

Owns writing those `jobs` columns (rules 5 and 6 read them: predictions by family, lost work
since the last checkpoint) so a restarted controller and every API replica see them. The last
checkpoint only moves forward: a report older than the one stored changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.store import timestamps

DESCRIBE = text(
    """
    UPDATE jobs SET family = u.family, checkpoint_interval_s = u.interval,
           last_checkpoint_at = GREATEST(jobs.last_checkpoint_at, u.checkpoint)
    FROM unnest(CAST(:uids AS text[]), CAST(:families AS text[]),
                CAST(:intervals AS integer[]), CAST(:checkpoints AS timestamptz[]))
         AS u(uid, family, interval, checkpoint)
    WHERE jobs.uid = u.uid
    RETURNING jobs.uid
    """
)


@dataclass(frozen=True, slots=True)
class Reported:
    """A job's own facts as its TrainingJob states them; None where it states nothing."""

    uid: str
    family: str | None = None
    checkpoint_interval_s: int | None = None
    last_checkpoint_at: float | None = None


async def describe(session: AsyncSession, reports: Sequence[Reported]) -> set[str]:
    """Store the reports in one statement; returns the uids of the jobs that have a row."""
    if not reports:
        return set()
    result = await session.execute(
        DESCRIBE,
        {
            "uids": [r.uid for r in reports],
            "families": [r.family for r in reports],
            "intervals": [r.checkpoint_interval_s for r in reports],
            "checkpoints": [
                None
                if r.last_checkpoint_at is None
                else timestamps.to_datetime(r.last_checkpoint_at)
                for r in reports
            ],
        },
    )
    return {uid for (uid,) in result}
