"""Checkpoint reports and run facts, from each TrainingJob into the store (rules 5 and 6).

A training script reports a saved checkpoint by patching its own TrainingJob with the
annotation `gangq.dev/last-checkpoint: <RFC3339 time>`, using the pod's service account (deploy/
grants it `patch` on trainingjobs and keeps it to that one annotation). This module reads that
annotation, `spec.checkpointIntervalSeconds` and the label `gangq.dev/family` from the watch
cache and stores what changed, so lost work and predictions survive a restart. A value that is
not a time is ignored and reported once as a Warning event on the job; it never stops a step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from gangq.queue.core import prediction
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import cache
from gangq.queue.kube.actuator import Actuator
from gangq.queue.store import checkpoints, leader

CHECKPOINT_ANNOTATION = "gangq.dev/last-checkpoint"
FUTURE_TOLERANCE_S = 300.0
"""Clock skew allowed between a pod and the controller; a report further ahead is refused."""
_INT32_MAX = 2**31 - 1

logger = logging.getLogger(__name__)


def parse_checkpoint(value: str, *, now: float) -> float:
    """Unix seconds of an RFC3339 time with a zone, at most `now`; `InvalidInputError` else."""
    try:
        instant = datetime.fromisoformat(value.strip())
    except ValueError as error:
        raise InvalidInputError(f"{value!r} is not an RFC3339 time ({error})") from error
    if instant.tzinfo is None:
        raise InvalidInputError(
            f"{value!r} has no time zone (write it as e.g. 2026-12-01T15:04:05Z)"
        )
    at = instant.timestamp()
    if at > now + FUTURE_TOLERANCE_S:
        raise InvalidInputError(f"{value!r} is in the future")
    return min(at, now)


def _interval(spec: dict[str, Any]) -> int | None:
    """`spec.checkpointIntervalSeconds` as the CRD admits it; anything else counts as unset
    (the queue's own validation reports a bad spec when the job is submitted)."""
    value = spec.get("checkpointIntervalSeconds")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _INT32_MAX:
        return None
    return value


def reported(job: Mapping[str, Any], *, now: float) -> tuple[checkpoints.Reported, str | None]:
    """What the job states about its run, and why its checkpoint annotation was ignored."""
    meta = job.get("metadata") or {}
    family = (meta.get("labels") or {}).get(prediction.FAMILY_LABEL) or None
    raw = (meta.get("annotations") or {}).get(CHECKPOINT_ANNOTATION)
    checkpoint, problem = None, None
    if raw is not None:
        try:
            checkpoint = parse_checkpoint(str(raw), now=now)
        except InvalidInputError as error:
            problem = f"annotation {CHECKPOINT_ANNOTATION} ignored: {error}"
    facts = checkpoints.Reported(
        uid=str(meta.get("uid")),
        family=None if family is None else str(family),
        checkpoint_interval_s=_interval(job.get("spec") or {}),
        last_checkpoint_at=checkpoint,
    )
    return facts, problem


class Checkpoints:
    """The leader's reader of reports; remembers what it stored and which bad values it told
    about, so an unchanged TrainingJob costs a dictionary lookup per step."""

    def __init__(
        self,
        view: cache.ClusterCache,
        *,
        writes: leader.Fenced,
        actuator: Actuator,
        clock: Callable[[], float],
    ) -> None:
        self.view = view
        self.writes = writes
        self.actuator = actuator
        self.clock = clock
        self.seen: dict[str, str] = {}
        """Job uid -> the resourceVersion whose facts are stored."""
        self.stored: dict[str, checkpoints.Reported] = {}
        self.warned: dict[str, str] = {}
        """Job uid -> the bad annotation value already reported in an event."""

    async def sync(self, *, queued: Collection[str]) -> None:
        """Store the facts of every queued job (`queued`: uids with a store row) that changed."""
        now = self.clock()
        changed: list[tuple[str, checkpoints.Reported]] = []
        # a copy: the watches change the cache while a warning is written (a job shown
        # finished has no run left for its facts to matter to)
        present = list(self.view.open_jobs().values())
        if len(self.seen) > len(present):
            self._forget({str((job.get("metadata") or {}).get("uid")) for job in present})
        for job in present:
            meta = job.get("metadata") or {}
            uid = str(meta.get("uid"))
            version = str(meta.get("resourceVersion"))
            if uid not in queued or self.seen.get(uid) == version:
                continue
            facts, problem = reported(job, now=now)
            raw = str((meta.get("annotations") or {}).get(CHECKPOINT_ANNOTATION))
            if problem is not None and self.warned.get(uid) != raw:
                self.warned[uid] = raw
                logger.info("job %s: %s", uid, problem)
                await self.actuator.event(job, "CheckpointIgnored", problem, warning=True)
            if facts == self.stored.get(uid, checkpoints.Reported(uid=uid)):
                self.seen[uid] = version
                continue
            changed.append((version, facts))
        if not changed:
            return
        async with self.writes.transaction() as session:
            written = await checkpoints.describe(session, [facts for _, facts in changed])
        for version, facts in changed:
            if facts.uid in written:
                self.seen[facts.uid], self.stored[facts.uid] = version, facts

    def _forget(self, keep: set[str]) -> None:
        """Drop what is remembered of jobs deleted or finished."""
        for memory in (self.seen, self.stored, self.warned):
            for uid in set(memory) - keep:
                del memory[uid]
