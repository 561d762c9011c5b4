"""One leader step: queue new TrainingJobs, run the cycle, drive every gang, show status.

Owns turning cluster events into store writes (queueing through `intake`, finishing deleted
jobs) and carrying out each gang's lifecycle verdict from committed store state: the cycle's
decisions are read back from PostgreSQL, never from memory, so a restarted leader does the
same (rule 9).
Errors from bad input or a refused write are logged per job and never stop the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings
from gangq.queue.core import capacity, explain, model, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.planner import Planner
from gangq.queue.kube import (
    cache,
    checkpoints,
    estimates,
    gangs,
    history,
    intake,
    lifecycle,
    objects,
    recovering,
    recovery,
    resources,
    retry,
    scale,
    status,
    trainingjob,
)
from gangq.queue.kube.actuator import Actuator
from gangq.queue.kube.client import KubeError
from gangq.queue.store import admission, jobs, leader, snapshot, tenants
from gangq.queue.store.errors import ConflictError, NotLeaderError, StoreError

logger = logging.getLogger(__name__)
STATUS_WRITES_IN_FLIGHT = 32
"""Status patches of one step sent at once: a burst of phase changes is shown in one round."""


@dataclass(frozen=True, slots=True)
class _Shown:
    version: str
    """The job's resourceVersion the status write was based on: while the cache still shows
    it (and gangq still wants the same status), the write needs no repeating. A write that
    changed nothing leaves the version as it was, so the status is compared as well."""
    status: dict[str, Any]
    at: float


def _reserved(held: list[gangs.Held]) -> dict[str, frozenset[DeviceId]]:
    return {h.row.uid: frozenset(d for p in h.placement for d in p.devices) for h in held}


class Reconciler:
    """The leader's work; `step` is called once per (coalesced) wake-up."""

    def __init__(
        self,
        view: cache.ClusterCache,
        *,
        settings: ControllerSettings,
        sessions: async_sessionmaker[AsyncSession],
        reads: async_sessionmaker[AsyncSession],
        clock: Callable[[], float],
        metrics: gangq_metrics.Metrics,
    ) -> None:
        """`sessions` open transactions (the cycle and every fenced write); `reads` are
        `database.read_session_factory`'s, for the step's reads."""
        self.view = view
        self.settings = settings
        self.sessions = sessions
        self.reads = reads
        self.clock = clock
        self.metrics = metrics
        self.matcher = DeviceMatcher()
        """Kept across terms: a selector's verdict on a device depends on neither database."""
        self.policy = settings.policy()
        self.term: leader.Term | None = None
        self._fresh()

    def _fresh(self) -> None:
        """Everything a step remembers, built anew for each leadership term: a new term may
        meet another database (a promoted standby, a restored backup), where nothing this
        process remembers of the old one holds."""
        view, settings, clock, metrics = self.view, self.settings, self.clock, self.metrics
        self.writes = leader.Fenced(self.sessions)
        """Every store write of a step goes through here: fenced by the step's term."""
        self.actuator = Actuator(
            view.kube, settings=settings, clock=clock, pod_groups=view.pod_groups
        )
        self.history = history.History(self.reads)
        self.planner = Planner(self.matcher)
        self.views = snapshot.Views()
        self.checkpoints = checkpoints.Checkpoints(
            view, writes=self.writes, actuator=self.actuator, clock=clock
        )
        self.gangs = gangs.Gangs(
            view,
            settings=settings,
            writes=self.writes,
            clock=clock,
            metrics=metrics,
            actuator=self.actuator,
            history=self.history,
            rows=self.views.rows,
        )
        self.intake = intake.Intake(
            view,
            settings=settings,
            writes=self.writes,
            actuator=self.actuator,
            matcher=self.matcher,
            clock=clock,
        )
        self.recovery = recovering.Recovery(
            view,
            settings=settings,
            writes=self.writes,
            actuator=self.actuator,
            clock=clock,
            metrics=metrics,
        )
        self.recovered = False
        """Whether this term's recovery pass ran (it runs before the term's first cycle)."""
        self.holding: dict[str, frozenset[DeviceId]] = {}
        """The devices the store held per gang uid at the last read: what the cluster shows
        beyond them stays out of the cycle (`recovery.lingering`)."""
        self.live = jobs.LiveRecords()
        self.shown: dict[str, _Shown] = {}
        """Job uid -> the last status write, so a write the cache has not seen is not repeated."""
        self.settled: dict[str, tuple[object, ...]] = {}
        """Job uid -> what its status was last judged from, when that found nothing to write
        and nothing that time alone can change: while the same, the job is not judged again
        (a long queue would cost a status computation per waiting job per step)."""
        self.gauged_at = float("-inf")
        self.reason_due: float | None = None
        """When the earliest new reason held back by the per-job rate may be written."""
        self.told: dict[str, set[str]] = {}
        """Job uid -> the kinds of wait (`status.wait_kind`) its status has shown since it
        was last queued: the wait's first reason of each kind is news (an Event, a status
        write at once), a return to one of them is churn."""

    def next_deadline_s(self) -> float:
        """Seconds until the earliest startup deadline or held-back reason (the timer must not
        sleep past them)."""
        deadlines = list(self.gangs.deadlines.values())
        if self.reason_due is not None:
            deadlines.append(self.reason_due)
        if not deadlines:
            return self.settings.cycle_interval_s
        return max(0.0, min(deadlines) - self.clock()) + 0.05

    async def step(self, *, term: leader.Term) -> None:
        """Enqueue, scale, cycle, drive gangs, sweep, show status: one leader turn.

        Nothing here raises on bad input or a lost database: the step is logged and retried
        on the next wake-up, from whatever the store and the caches say then.
        """
        if self.term != term:
            self._fresh()
            self.term = term
        self.writes.term = term
        try:
            inventory = self.view.inventory()
            if inventory is None:
                return
            if not self.recovered:
                await self._write_tenants()
                await self._recover(inventory)
                self.recovered = True
            await self.intake.run(inventory)
            await self.checkpoints.sync(queued=self.intake.known)
            estimator = await self.history.ensure(term=term)
            await self._scale()
            reachable, held_back = self._lingering(inventory)
            started = time.monotonic()
            result = await admission.run(
                self.sessions,
                reachable,
                held_back=held_back,
                policy=self.policy,
                now=self.clock(),
                planner=self.planner,
                term=term,
                actor=self.settings.actor,
                estimator=estimator,
                views=self.views,
            )
            gangq_metrics.observe_cycle(self.metrics, time.monotonic() - started)
            records, held = await self._read_state()
            if await self.recovery.run(held, inventory, first=False):
                records, held = await self._read_state()
            self._count(result, records)
            if time.monotonic() >= self.gauged_at + self.settings.gauges_interval_s:
                self.gauged_at = time.monotonic()
                self._gauges(inventory, held)
            await self.gangs.drive_all(held, inventory, records)
            await self._sweep(held, records)
            await self._show(records, held)
        except NotLeaderError as error:
            logger.warning("not the leader any more: %s", error)
        except (StoreError, DBAPIError, OSError, InvalidInputError, KubeError) as error:
            logger.warning("step failed, retrying on the next wake-up: %s", error)

    async def _recover(self, inventory: model.Inventory) -> None:
        """The term's first recovery pass (module `recovery`): before anything is admitted,
        the store and the cluster are made to agree. Later passes, one a step, judge only
        the cluster's gangs the store does not hold."""
        async with self.reads() as session:
            held = await self.gangs.load(session)
        if await self.recovery.run(held, inventory, first=True):
            self.live = jobs.LiveRecords()
            async with self.reads() as session:
                held = await self.gangs.load(session)
        self.holding = _reserved(held)

    def _lingering(self, inventory: model.Inventory) -> tuple[model.Inventory, frozenset[str]]:
        """The inventory less the devices of claims the store does not back (a teardown under
        way, a gang the recovery could not adopt), and the queue entries held back until what
        the cluster still shows of their earlier attempt is gone (module `recovery`)."""
        found = recovery.lingering(
            self.view.by_gang(resources.RESOURCE_CLAIMS),
            self.view.running_gangs(),
            self.holding,
        )
        if not found.devices:
            return inventory, found.gangs
        others = inventory.held_by_others | found.devices
        return dataclasses.replace(inventory, held_by_others=others), found.gangs

    async def _write_tenants(self) -> None:
        if not self.settings.tenants:
            return
        async with self.writes.transaction() as session:
            for tenant in self.settings.tenants:
                await tenants.upsert_tenant(
                    session,
                    tenant.name,
                    tenant.to_core(),
                    actor=self.settings.actor,
                    now=self.clock(),
                )

    def _unshown(self) -> list[str]:
        """Uids of the jobs whose end their TrainingJob does not show (yet)."""
        return [
            str((job.get("metadata") or {}).get("uid"))
            for job in self.view.open_jobs().values()
            if (job.get("status") or {}).get("phase") not in scale.FINISHED
        ] + sorted(self.intake.changed)

    async def _records(self) -> dict[str, jobs.JobRecord]:
        """Live store records, and finished ones whose end their TrainingJob does not show."""
        self.writes.track()
        async with self.reads() as session:
            return await self.live.read(session, uids=self._unshown())

    async def _read_state(self) -> tuple[dict[str, jobs.JobRecord], list[gangs.Held]]:
        """`_records` and the gangs holding devices, after the cycle: one session for both."""
        self.writes.track()
        async with self.reads() as session:
            records = await self.live.read(session, uids=self._unshown())
            held = await self.gangs.load(session)
        self.holding = _reserved(held)
        return records, held

    def _gauges(self, inventory: model.Inventory, held: list[gangs.Held]) -> None:
        """Device and tenant gauges of `/metrics` from the inventory and the gangs holding."""
        reserved = frozenset(d for h in held for p in h.placement for d in p.devices)
        report = capacity.summarize(inventory, reserved, matcher=self.matcher, scopes=False)
        for device_class in self.settings.managed_device_classes:
            usage = report.classes.get(device_class)
            if usage is None:
                continue
            gangq_metrics.set_devices(
                self.metrics,
                device_class,
                free=usage.by_state.get("free", 0),
                reserved=usage.by_state.get("reserved", 0),
                held_by_others=usage.by_state.get("held_by_others", 0),
            )
            largest = max(usage.largest_gang_devices, usage.largest_replica)
            gangq_metrics.set_largest_placeable_gang(self.metrics, device_class, devices=largest)
        tenant_use: dict[tuple[str, str], tuple[float, float]] = {}
        for h in held:
            count = float(
                sharing.placement_equivalent(h.placement, inventory.devices, inventory.counters)
                / sharing.WHOLE
            )
            nominal, borrowed = tenant_use.get((h.row.tenant, h.row.device_class), (0.0, 0.0))
            tenant_use[(h.row.tenant, h.row.device_class)] = (
                nominal + count - h.row.borrowed,
                borrowed + h.row.borrowed,
            )
        gangq_metrics.set_tenant_devices(self.metrics, tenant_use)

    def _count(self, result: model.CycleResult, records: Mapping[str, jobs.JobRecord]) -> None:
        by_key = {r.key: r for r in records.values() if r.phase not in ("Succeeded", "Failed")}
        for admitted in result.admissions:
            record = by_key.get(admitted.job)
            if record is not None and record.admitted_at is not None:
                wait = record.admitted_at - record.submitted_at
                gangq_metrics.record_admission(self.metrics, record.tier, wait_seconds=wait)
        for preemption in result.preemptions:
            for victim in preemption.victims:
                record = by_key.get(victim.job)
                if record is not None and not record.is_evicting:
                    gangq_metrics.record_preemption(self.metrics, record.tier, reason="priority")
        pending: dict[tuple[str, str], int] = defaultdict(int)
        never_fits: dict[tuple[str, str], int] = defaultdict(int)
        oldest: dict[str, float] = {}
        now = self.clock()
        for record in by_key.values():
            if record.phase != "Queued":
                continue
            if record.reason is not None and record.reason.code is explain.ReasonCode.UNSCHEDULABLE:
                never_fits[(record.tier, record.tenant)] += 1
                continue
            pending[(record.tier, record.tenant)] += 1
            oldest[record.tier] = max(oldest.get(record.tier, 0.0), now - record.submitted_at)
        gangq_metrics.set_queue(
            self.metrics, pending, unschedulable=never_fits, oldest_pending_seconds=oldest
        )

    async def _sweep(self, held: list[gangs.Held], records: Mapping[str, jobs.JobRecord]) -> None:
        """Claims and running pods of gangs that hold nothing (left by a crash, or partial
        gangs the recovery tore down) go, except the whole ones the recovery adopts;
        terminated pods stay for their logs. A job whose TrainingJob is gone finishes in the
        store; a finished one past its `ttlSecondsAfterFinished` is deleted."""
        holding = {h.row.uid for h in held}
        busy = {h.gang.job_uid for h in held}
        pods = self.view.by_gang(resources.PODS)
        claims = self.view.by_gang(resources.RESOURCE_CLAIMS)
        for uid in (self.view.running_gangs() | set(claims)) - holding:
            if uid in self.recovery.whole:
                continue  # the recovery adopts it
            running = [p for p in pods.get(uid, {}).values() if not lifecycle.is_terminated(p)]
            left = list(claims.get(uid, {}).values())
            if not running and not left:
                continue
            busy.add(scale.job_uid(uid))
            await self.actuator.teardown(namespace="", gang=None, pods=running, claims=left)
        for job in list(self.view.open_jobs().values()):
            meta = job.get("metadata") or {}
            uid = str(meta.get("uid"))
            if not meta.get("deletionTimestamp"):
                await self._expire(job)
                continue
            if uid in busy or trainingjob.FINALIZER not in (meta.get("finalizers") or []):
                continue
            # A finalizer an earlier gangq added: dropped once the job's gangs are gone.
            live = [
                r
                for r in records.values()
                if scale.job_uid(r.uid) == uid and r.phase not in scale.FINISHED
            ]
            if await self._finish(live, reason="TrainingJob deleted"):
                await self.actuator.drop_job_finalizer(job)
        # Queued entries of a TrainingJob that is gone (a suspended one stays an admin's).
        gone = [
            r
            for r in records.values()
            if r.phase == "Queued"
            and scale.job_uid(r.uid) not in busy
            and self.view.job(scale.job_uid(r.uid)) is None
        ]
        await self._finish(gone, reason="TrainingJob deleted")

    async def _expire(self, job: dict[str, Any]) -> None:
        """Delete a finished TrainingJob once `spec.ttlSecondsAfterFinished` has passed (as
        Kubernetes does for Jobs); its kept pods go with it (owner references)."""
        shown = job.get("status") or {}
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if shown.get("phase") not in scale.FINISHED or not isinstance(ttl, int):
            return
        finished = objects.parse_rfc3339(shown.get("finishedAt"))
        if finished is None or self.clock() < finished + ttl:
            return
        meta = job["metadata"]
        try:
            await self.view.kube.delete(
                resources.TRAINING_JOBS, str(meta["namespace"]), str(meta["name"])
            )
            logger.info(
                "deleted %s: ttlSecondsAfterFinished=%d passed", trainingjob.key_of(job), ttl
            )
        except KubeError as error:
            if error.status != 404:
                logger.info("deleting %s after its TTL: %s", trainingjob.key_of(job), error)

    async def _finish(self, live: list[jobs.JobRecord], *, reason: str) -> bool:
        """End queue entries that hold no devices; False when the store refused one."""
        for record in live:
            try:
                async with self.writes.transaction(changing=[record.uid]) as session:
                    await jobs.finish(
                        session,
                        record.key,
                        succeeded=False,
                        at=self.clock(),
                        actor=self.settings.actor,
                        reason=reason,
                    )
            except InvalidInputError as error:
                logger.warning("finishing %s: %s", record.key, error)
                return False
        return True

    async def _scale(self) -> None:
        """Queue the added replicas of running long-running jobs; end the removed ones. The
        store is read only when a TrainingJob shows such a job running (seldom many)."""
        self.gangs.scaled_away = set()
        self.gangs.shrinking = {}
        serving = [
            job
            for job in list(self.view.open_jobs().values())
            if (job.get("status") or {}).get("phase") == "Running"
            and not (job.get("metadata") or {}).get("deletionTimestamp")
            and self._long_running(str((job.get("spec") or {}).get("tier")))
        ]
        if not serving:
            return
        records = await self._records()
        for job in serving:
            meta = job.get("metadata") or {}
            base = records.get(str(meta.get("uid")))
            if base is None or base.phase != "Running" or not self._long_running(base.tier):
                continue
            try:
                wanted = trainingjob.parse_spec(job).replicas
                extensions = [
                    r
                    for r in records.values()
                    if scale.job_uid(r.uid) == base.uid and r.uid != base.uid
                ]
                plan = scale.plan(wanted, base=base, extensions=extensions)
                holding = [r for r in plan.drop if r.phase in ("Admitted", "Running")]
                self.gangs.scaled_away.update(r.uid for r in holding)
                await self._finish([r for r in plan.drop if r not in holding], reason="scaled down")
                if plan.shrink_to:
                    self.gangs.shrinking[base.uid] = plan.shrink_to
                if plan.add:
                    await self._scale_up(job, first=plan.first, add=plan.add)
            except InvalidInputError as error:
                logger.warning("scaling %s: %s", trainingjob.key_of(job), error)

    def _long_running(self, tier_name: str) -> bool:
        tier = self.settings.tier(tier_name)
        return tier is not None and tier.long_running

    async def _scale_up(self, job: dict[str, Any], *, first: int, add: int) -> None:
        namespace = str(job["metadata"]["namespace"])
        pending = trainingjob.pending_job(job, tenant=self.view.tenant_of(namespace))
        entry = scale.extension(pending, first=first, add=add, now=self.clock())
        try:
            async with self.writes.transaction() as session:
                await jobs.enqueue(session, [entry], actor=self.settings.actor, now=self.clock())
        except ConflictError as error:
            logger.info("scale-up of %s already queued: %s", pending.key, error)
            return
        message = f"replicas {first}..{first + add - 1} queued as one gang"
        await self.actuator.event(job, "ScaleUp", message, warning=False)

    async def _show(self, records: Mapping[str, jobs.JobRecord], held: list[gangs.Held]) -> None:
        """Patch each TrainingJob's status where it differs from the store's record."""
        placements, skews = self._held_by_job(held)
        now = objects.rfc3339(self.clock())
        fresh = await self._records_since(records)
        waiting = {
            scale.job_uid(r.uid): f"scale-up to replica {scale.first_replica(r.key)}+ waits: "
            + r.reason.message
            for r in fresh.values()
            if r.phase == "Queued" and r.reason is not None and r.uid != scale.job_uid(r.uid)
        }
        updates: list[tuple[dict[str, Any], dict[str, Any]]] = []
        shown: dict[str, _Shown] = {}
        moved: list[tuple[float, str, dict[str, Any], dict[str, Any], _Shown]] = []
        settled: dict[str, tuple[object, ...]] = {}
        clock = self.clock()
        self.reason_due = None
        showable = self._showable(fresh, records)
        seen = {str((job.get("metadata") or {}).get("uid")) for job in showable}
        self.told = {uid: kinds for uid, kinds in self.told.items() if uid in seen}
        for job in showable:
            meta = job.get("metadata") or {}
            uid = str(meta.get("uid"))
            record = fresh.get(uid) or records.get(uid)
            if meta.get("deletionTimestamp") or (
                record is None and uid not in self.intake.problems
            ):
                # A job not queued yet gets its first status once it is (the next step).
                continue
            version = str(meta.get("resourceVersion"))
            placement = placements.get(uid, ())
            inputs = (version, record, placement, skews.get(uid), waiting.get(uid))
            last = self.shown.get(uid)
            if last is not None:
                shown[uid] = last
            if self.settled.get(uid) == inputs and uid not in self.intake.problems:
                settled[uid] = inputs
                continue
            current = job.get("status") or {}
            wanted = self._wanted(
                job,
                record,
                placement=placement,
                skew_ms=skews.get(uid),
                scale_up=waiting.get(uid),
                now=now,
            )
            self._note_told(uid, current, wanted)
            shown_as = self._shown_as(current, wanted, last=last, version=version, clock=clock)
            if shown_as is not None:
                # An estimate that differs a little may move enough with time alone.
                if shown_as.get(estimates.FIELD) == wanted.get(estimates.FIELD):
                    settled[uid] = inputs
                continue
            body = {"status": status.merged_conditions(current, wanted)}
            if (
                last is not None
                and status.only_queue_moved(current, wanted)
                and self._holds_back(uid, current, wanted, last=last, clock=clock)
            ):
                if clock - last.at >= self.settings.status_refresh_s:
                    written = _Shown(version=version, status=wanted, at=clock)
                    moved.append((last.at, uid, job, body, written))
                continue
            shown[uid] = _Shown(version=version, status=wanted, at=clock)
            updates.append((job, body))
        # Queue moves are churn in proportion to the queue's length: the stalest go first, a
        # bounded number per step, so a long queue cannot crowd out the API server.
        moved.sort(key=lambda entry: (entry[0], entry[1]))
        for _, uid, job, body, written in moved[: self.settings.status_moves_per_step]:
            shown[uid] = written
            updates.append((job, body))
        self.shown = shown
        self.settled = settled
        await self._write_statuses(updates)

    async def _records_since(
        self, records: Mapping[str, jobs.JobRecord]
    ) -> Mapping[str, jobs.JobRecord]:
        """`records` with what this step's writes changed since they were read: only those
        records are read again, unless a write did not say which it changed."""
        changed = self.writes.changed()
        if changed is None:
            return await self._records()
        if not changed:
            return records
        self.writes.track()
        async with self.reads() as session:
            return {**records, **await self.live.read_again(session, uids=changed)}

    def _held_by_job(
        self, held: list[gangs.Held]
    ) -> tuple[dict[str, tuple[model.ReplicaPlacement, ...]], dict[str, int]]:
        """Per job uid, its replicas' placement (scale-up gangs included, the replicas of a
        grow this step undid left out) by replica, and the largest release skew of its
        gangs."""
        placements: dict[str, list[model.ReplicaPlacement]] = defaultdict(list)
        skews: dict[str, int] = {}
        for h in held:
            kept = self.gangs.grows.undone.get(h.row.uid)
            placements[h.gang.job_uid].extend(
                h.placement if kept is None else (p for p in h.placement if p.replica < kept)
            )
            if h.row.uid in self.gangs.skews_ms:
                skews[h.gang.job_uid] = max(
                    skews.get(h.gang.job_uid, 0), self.gangs.skews_ms[h.row.uid]
                )
        ordered = {
            uid: tuple(sorted(replicas, key=lambda p: p.replica))
            for uid, replicas in placements.items()
        }
        return ordered, skews

    def _note_told(self, uid: str, current: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
        """The kind of wait the cluster shows is told; a job no longer queued starts afresh."""
        if wanted.get("phase") != "Queued":
            self.told.pop(uid, None)
        elif (kind := status.wait_kind(current)) is not None:
            self.told.setdefault(uid, set()).add(kind)

    def _shown_as(
        self,
        current: Mapping[str, Any],
        wanted: Mapping[str, Any],
        *,
        last: _Shown | None,
        version: str,
        clock: float,
    ) -> Mapping[str, Any] | None:
        """The status that already says what `wanted` says: the one the cluster shows, or
        the last one written while the cache still shows the version it was based on. None
        when a write is due."""
        if (
            last is not None
            and last.version == version
            and not self._differs(last.status, wanted, now=clock)
        ):
            return last.status
        if not self._differs(current, wanted, now=clock) and current.get(
            "releaseSkewMs"
        ) == wanted.get("releaseSkewMs"):
            return current
        return None

    def _wanted(
        self,
        job: Mapping[str, Any],
        record: jobs.JobRecord | None,
        *,
        placement: tuple[model.ReplicaPlacement, ...],
        skew_ms: int | None,
        scale_up: str | None,
        now: str,
    ) -> dict[str, Any]:
        """`status.desired`, with what the job's object and this step add: the generation
        observed, the release skew, a waiting scale-up's reason, a finished job's placement."""
        meta = job.get("metadata") or {}
        uid = str(meta.get("uid"))
        wanted = status.desired(
            record,
            placement=placement,
            replicas=int((job.get("spec") or {}).get("replicas") or 0),
            problem=self.intake.problems.get(uid),
            now=now,
        )
        for condition in wanted.get("conditions") or []:
            condition["observedGeneration"] = meta.get("generation")  # see intake
        if skew_ms is not None:
            wanted["releaseSkewMs"] = skew_ms
        if scale_up is not None and wanted.get("phase") == "Running":
            wanted["reason"] = scale_up
        if wanted.get("phase") in scale.FINISHED:
            # Where the job ran, and at what size, stays readable after its end.
            shown = job.get("status") or {}
            wanted["placement"] = shown.get("placement") or []
            wanted["size"] = shown.get("size")
        return wanted

    def _showable(self, *records: Mapping[str, jobs.JobRecord]) -> list[dict[str, Any]]:
        """The open TrainingJobs, and any other one the store has a record of: its status
        may show an end that the store has taken back."""
        found = {
            str((job.get("metadata") or {}).get("uid")): job
            for job in self.view.open_jobs().values()
        }
        for uid in {uid for read in records for uid in read}:
            if uid not in found and (job := self.view.job(uid)) is not None:
                found[uid] = job
        return list(found.values())

    @staticmethod
    def _differs(current: Mapping[str, Any], wanted: Mapping[str, Any], *, now: float) -> bool:
        """A status write is due: a compared field changed or the estimated start moved."""
        return status.differs(current, wanted) or estimates.has_moved(current, wanted, now=now)

    def _holds_back(
        self,
        uid: str,
        current: Mapping[str, Any],
        wanted: Mapping[str, Any],
        *,
        last: _Shown,
        clock: float,
    ) -> bool:
        """Whether a queued job's changed status waits. A move, or a swing back to a kind of
        wait shown earlier in this wait, waits for the bounded refresh (churn: in a full
        cluster a job's reason swings between capacity and a backfill reservation ahead with
        every ending, and each swing would cost a write per waiting job). Another reason goes
        out at once, at most once per `status_reason_interval_s` per job, so the status soon
        says what the store says."""
        if current.get("reason") == wanted.get("reason"):
            return True
        kind = status.wait_kind(wanted)
        if kind != status.wait_kind(current) and kind in self.told.get(uid, ()):
            return True
        due = last.at + self.settings.status_reason_interval_s
        if clock >= due:
            return False
        self.reason_due = min(self.reason_due or due, due)
        return True

    async def _write_statuses(self, updates: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Send the status patches concurrently; a refused one is tried again next step. A job
        that starts to wait, or waits for another kind of reason, also gets an Event."""
        limit = asyncio.Semaphore(STATUS_WRITES_IN_FLIGHT)

        async def write(job: dict[str, Any], body: dict[str, Any]) -> None:
            meta = job["metadata"]
            async with limit:
                try:
                    await self.view.kube.patch(
                        resources.TRAINING_JOBS,
                        str(meta.get("namespace")),
                        str(meta.get("name")),
                        body,
                        subresource="status",
                    )
                except KubeError as error:
                    self.shown.pop(str(meta.get("uid")), None)
                    what = f"status of {trainingjob.key_of(job)}"
                    if error.status == 409:
                        retry.note_expected(error, what=what)
                    else:
                        logger.info("%s not written: %s", what, error)
                    return
                uid = str(meta.get("uid"))
                told = self.told.get(uid, set())
                waits = status.new_wait(job.get("status") or {}, body["status"], told=told)
                kind = status.wait_kind(body["status"])
                if kind is not None:
                    self.told[uid] = told | {kind}
                if waits is not None:
                    await self.actuator.event(job, waits[0], waits[1], warning=False)

        await asyncio.gather(*(write(job, body) for job, body in updates))
