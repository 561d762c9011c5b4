"""New TrainingJobs into the queue, or into the terminal invalid state, before anything is
reserved.

Owns the intake of each TrainingJob: read and check everything gangq will derive from it (the
spec's ranges, the names of its pods, claims and Service, a tenant, the tier and device class
and CEL selectors against the configuration), then queue it, or record it Failed with the
reason (store module `refusals`) and one Kubernetes Event, never a retry loop. A refused job
is judged again only when its spec (generation) or its namespace's tenant changes; a fixed
one goes back to Queued. Edges translate; the judgement of the configuration is the core's
(`feasibility.invalid_reason`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.config import ControllerSettings
from gangq.queue.core import feasibility, model
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import cache, status, trainingjob
from gangq.queue.kube.actuator import Actuator
from gangq.queue.store import jobs, leader, refusals
from gangq.queue.store.errors import ConflictError

logger = logging.getLogger(__name__)


def _observed(job: Mapping[str, Any]) -> object:
    """The generation the job's conditions were written for."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Admissible":
            return condition.get("observedGeneration")
    return None


class Intake:
    """The queueing side of a leader step; its memory only spares repeated judgements."""

    def __init__(
        self,
        view: cache.ClusterCache,
        *,
        settings: ControllerSettings,
        writes: leader.Fenced,
        actuator: Actuator,
        matcher: DeviceMatcher,
        clock: Callable[[], float],
    ) -> None:
        self.view = view
        self.settings = settings
        self.policy = settings.policy()
        self.writes = writes
        self.actuator = actuator
        self.matcher = matcher
        self.clock = clock
        self.known: set[str] = set()
        """uids queued by this process (enqueue is idempotent, so a restart forgets freely)."""
        self.judged: dict[str, tuple[str, str | None]] = {}
        """uid of a refused job -> (generation, tenant) it was refused for."""
        self.problems: dict[str, status.Refusal] = {}
        """uid -> why a valid job is not queued yet (a name held by a live earlier job)."""
        self.changed: set[str] = set()
        """uids refused or queued again in the last pass: their status needs a fresh look."""

    def _judge(
        self, job: dict[str, Any], *, tenant: str | None, inventory: model.Inventory
    ) -> model.PendingJob | str:
        """The queue entry, or why the job can never be queued as it is."""
        try:
            pending = trainingjob.pending_job(job, tenant=tenant)
        except InvalidInputError as error:
            return str(error)
        reason = feasibility.invalid_reason(
            pending, policy=self.policy, inventory=inventory, matcher=self.matcher
        )
        if reason is None:
            return pending
        return reason.message.removeprefix(f"{reason.code}: ")

    async def run(self, inventory: model.Inventory) -> None:
        """Judge every TrainingJob not queued yet, and refused ones whose spec changed.

        New valid jobs of a pass go in one transaction (a burst queues at batch speed); only
        when the batch is refused are they queued one by one, so one bad job never holds back
        the others.
        """
        self.changed = set()
        fresh: list[tuple[dict[str, Any], model.PendingJob]] = []
        # a copy: the watches change the cache while a refusal is written (a job shown
        # finished is never new, and one refused for its spec stays open until it is fixed)
        for job in list(self.view.open_jobs().values()):
            meta = job.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if meta.get("deletionTimestamp"):
                continue
            refused = trainingjob.shows_invalid(job)
            if uid in self.known and not refused:
                continue
            tenant = self.view.tenant_of(str(meta.get("namespace")))
            seen = (str(meta.get("generation")), tenant)
            if self.judged.get(uid) == seen:
                continue
            if refused and uid not in self.judged and _observed(job) == meta.get("generation"):
                self.judged[uid] = seen  # refused at this generation (by an earlier leader)
                continue
            verdict = self._judge(job, tenant=tenant, inventory=inventory)
            if isinstance(verdict, str):
                self.judged[uid] = seen
                await self._refuse(job, tenant=tenant, message=verdict)
                continue
            if refused:
                self.judged[uid] = seen
            fresh.append((job, verdict))
        self.judged = {uid: seen for uid, seen in self.judged.items() if self.view.job(uid)}
        # No finalizer: what a TrainingJob owns goes with it (owner references), and a job
        # gone from the cache is finished in the store by the reconciler's sweep.
        ready = [pending for _, pending in fresh]
        if not ready:
            return
        try:
            await self._enqueue(ready)
        except (InvalidInputError, ConflictError):
            for pending in ready:
                try:
                    await self._enqueue([pending])
                except ConflictError as error:
                    self.problems[pending.uid] = status.Refusal(
                        f"waiting for the previous job {pending.key} to end: {error}"
                    )

    async def _refuse(self, job: dict[str, Any], *, tenant: str | None, message: str) -> None:
        """Failed for good (until the spec changes), said once in an Event."""
        async with self.writes.transaction() as session:
            changed = await refusals.refuse(
                session,
                trainingjob.summary(job, tenant=tenant),
                message=message,
                at=self.clock(),
                actor=self.settings.actor,
            )
        if changed:
            uid = str(job["metadata"].get("uid"))
            self.changed.add(uid)
            self.problems.pop(uid, None)
            logger.info("job %s refused: %s", trainingjob.key_of(job), message)
            await self.actuator.event(
                job, trainingjob.INVALID_SPEC, f"invalid: {message}", warning=True
            )

    async def _enqueue(self, batch: list[model.PendingJob]) -> None:
        async with self.writes.transaction() as session:
            new = [job for job in batch if not await self._revive(session, job)]
            await jobs.enqueue(session, new, actor=self.settings.actor, now=self.clock())
        for pending in batch:
            self.problems.pop(pending.uid, None)
            self.known.add(pending.uid)

    async def _revive(self, session: AsyncSession, job: model.PendingJob) -> bool:
        """A refused job whose spec is now right is queued again under its uid."""
        if job.uid not in self.judged:
            return False
        revived = await refusals.requeue_fixed(
            session, job, at=self.clock(), actor=self.settings.actor
        )
        if revived:
            self.changed.add(job.uid)
        return revived
