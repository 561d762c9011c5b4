"""Carries out a recovery pass (`recovery.decide`) at the start of a leadership term.

Owns the writes: the store transactions (fenced like every leader write) and the first pass of
each teardown. A teardown that needs more passes is finished by the reconciler's sweep, which
tears down every gang the store does not hold; meanwhile the gang's devices stay out of the
cycle (`recovery.unheld_devices`). An action that fails is logged and left: the next term's
pass, or the sweep, meets the same facts again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings
from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import cache, gangs, lifecycle, recovery, resources, scale, trainingjob
from gangq.queue.kube.actuator import Actuator
from gangq.queue.store import jobs, leader
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import EventKind, JobRow

logger = logging.getLogger(__name__)


class Recovery:
    def __init__(
        self,
        view: cache.ClusterCache,
        *,
        settings: ControllerSettings,
        writes: leader.Fenced,
        actuator: Actuator,
        clock: Callable[[], float],
        metrics: gangq_metrics.Metrics,
    ) -> None:
        self.view = view
        self.settings = settings
        self.writes = writes
        self.actuator = actuator
        self.clock = clock
        self.metrics = metrics
        self.whole: set[str] = set()
        """Gangs the last pass found whole and unheld (to adopt): the sweep leaves them be."""

    def cluster_gangs(
        self, *, besides: Collection[str] | None = None
    ) -> list[recovery.ClusterGang]:
        """The gangs among gangq's claims and pods, with their TrainingJob: every label, or
        with `besides` (the gang uids the store holds) only the others that have a claim or
        a live pod. A step must not walk the pods of every gang that ever ended, kept for
        their logs; a term's first pass may."""
        claims = self.view.by_gang(resources.RESOURCE_CLAIMS)
        pods = self.view.by_gang(resources.PODS)
        if besides is None:
            uids = set(claims) | set(pods)
        else:
            uids = (set(claims) | self.view.running_gangs()) - set(besides)
        found = []
        for uid in uids:
            live = [
                p
                for p in pods.get(uid, {}).values()
                if not (p.get("metadata") or {}).get("deletionTimestamp")
            ]
            found.append(
                recovery.ClusterGang(
                    uid=uid,
                    job=self.view.job(scale.job_uid(uid)),
                    claims=gangs.by_replica(claims.get(uid, {}).values()),
                    pods=gangs.by_replica(live),
                )
            )
        return found

    async def run(self, held: list[gangs.Held], inventory: model.Inventory, *, first: bool) -> int:
        """One pass; returns how many actions it carried out.

        The term's `first` pass, before its first cycle, does everything `recovery.decide`
        says. The later ones, one a step, only adopt, and only a gang seen whole and unheld by
        the step before too: what the caches show a moment after a gang ended (its claims'
        deletion not seen yet) must not pass for a gang the store forgot. They leave partial
        gangs to the sweep, which leaves them the whole ones (`whole`)."""
        actions = recovery.decide(
            held=[recovery.StoreGang(h.row.uid, h.gang.key, h.gang.admitted_at) for h in held],
            cluster=self.cluster_gangs(besides=None if first else [h.row.uid for h in held]),
            jobs_by_uid={uid: job for uid in self._uids(held) if (job := self.view.job(uid))},
            first=first,
        )
        seen, self.whole = (
            self.whole,
            {a.gang.uid for a in actions if isinstance(a, recovery.Adopt)},
        )
        if not first:
            actions = [a for a in actions if isinstance(a, recovery.Adopt) and a.gang.uid in seen]
        done = 0
        for action in actions:
            try:
                if isinstance(action, recovery.Release):
                    name = await self._release(action)
                elif isinstance(action, recovery.Adopt):
                    name = await self._adopt(action, inventory)
                else:
                    name = await self._tear_down(action)
            except (InvalidInputError, ConflictError) as error:
                logger.warning("recovery of %s not done: %s", _subject(action), error)
                continue
            gangq_metrics.record_recovery_action(self.metrics, action=name)
            logger.warning("recovery: %s: %s", _subject(action), action.reason)
            done += 1
        return done

    def _uids(self, held: list[gangs.Held]) -> set[str]:
        return {scale.job_uid(h.row.uid) for h in held}

    async def _release(self, action: recovery.Release) -> str:
        key = action.gang.key
        async with self.writes.transaction(changing=[action.gang.uid]) as session:
            if action.finished is not None:
                await jobs.finish(
                    session,
                    key,
                    succeeded=action.finished == "Succeeded",
                    at=self.clock(),
                    actor=self.settings.actor,
                    reason=action.reason,
                )
                return recovery.FINISHED
            await jobs.requeue(
                session,
                key,
                at=self.clock(),
                actor=self.settings.actor,
                reason=action.reason,
                waiting=None,
            )
        return recovery.RELEASED

    async def _adopt(self, action: recovery.Adopt, inventory: model.Inventory) -> str:
        job = dict(action.gang.job or {})
        async with self.writes.transaction(changing=[action.gang.uid]) as session:
            await self._queued(session, job)
            await jobs.adopt(
                session,
                action.gang.uid,
                action.placement,
                admitted_at=action.admitted_at,
                started_at=action.started_at,
                inventory=inventory,
                at=self.clock(),
                actor=self.settings.actor,
                reason=action.reason,
            )
        return recovery.ADOPTED

    async def _tear_down(self, action: recovery.TearDown) -> str:
        gang = action.gang
        await self.actuator.teardown(
            namespace="",
            gang=None,
            pods=[p for p in gang.pods.values() if not lifecycle.is_terminated(p)],
            claims=list(gang.claims.values()),
        )
        job = dict(gang.job or {})
        async with self.writes.transaction(changing=[gang.uid]) as session:
            row = await self._queued(session, job)
            if row is not None:
                await jobs.record_event(
                    session,
                    row,
                    kind=EventKind.RECOVERED,
                    actor=self.settings.actor,
                    at=self.clock(),
                    reason=action.reason,
                    details={"action": "torn_down", "gang": gang.uid},
                )
        return recovery.TORN_DOWN

    async def _queued(self, session: AsyncSession, job: dict[str, Any]) -> JobRow | None:
        """The job's live queue row, queued first when the store has none (the intake would
        queue it later in the step anyway; the history entry needs it now)."""
        pending = trainingjob.pending_job(
            job, tenant=self.view.tenant_of(str(job["metadata"]["namespace"]))
        )
        await jobs.enqueue(session, [pending], actor=self.settings.actor, now=self.clock())
        return await jobs.live_row(session, pending.uid)


def _subject(action: recovery.Action) -> str:
    """The job's key, and the gang's uid when it is not the job's own gang (a scale-up)."""
    if isinstance(action, recovery.Release):
        return action.gang.key
    meta = (action.gang.job or {}).get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    return key if meta.get("uid") == action.gang.uid else f"{key} (gang {action.gang.uid})"
