"""Driving every gang that holds devices through its lifecycle, from committed store state.

Owns reading the holding gangs (store rows, reservations mapped to the job's replica numbers,
the pods and claims labelled with the gang) and carrying out `lifecycle.assess`'s verdict:
build and release, mark Running, restart in place, or tear down and only then release the
devices in the store (rule 1: never reserved for two jobs, even in the cluster).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue import logconfig
from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings
from gangq.queue.core import derived, explain, model
from gangq.queue.core import inventory as inventory_builder
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import (
    blame,
    cache,
    checkpoints,
    growing,
    history,
    lifecycle,
    objects,
    resources,
    retry,
    scale,
    status,
    trainingjob,
)
from gangq.queue.kube.actuator import Actuator
from gangq.queue.kube.client import KubeError
from gangq.queue.store import (
    grows,
    jobs,
    leader,
    liverows,
    refusals,
    runs,
    snapshot,
    timestamps,
)

logger = logging.getLogger(__name__)
EVENTFUL = (
    lifecycle.Ending.FAILED,
    lifecycle.Ending.REQUEUE,
    lifecycle.Ending.PREEMPTED,
    lifecycle.Ending.REFUSED,
)
"""Endings that get a Kubernetes Event (Warning): the ones a person has to look into."""
QUEUED_AGAIN = (lifecycle.Ending.REQUEUE, lifecycle.Ending.PREEMPTED, lifecycle.Ending.REFUSED)
"""Endings that release the gang and queue its job again."""
INVALID = "invalid: "
"""Start of the reason of a gang whose objects the API server refused for their spec."""
API_SERVER_REFUSED = "ApiServerRefused"
"""Reason of the Event of a gang torn down because the API server refused gangq's writes."""
SHRUNK = "Shrunk"
"""Reason of the Event of an elastic gang that gave back replicas instead of being evicted."""
DRIVES_IN_FLIGHT = 32
"""Gangs driven at once: a burst of admissions must not queue hundreds of requests on the
API server, where the last would time out and be retried, adding to the load."""


@dataclass(frozen=True, slots=True)
class Held:
    """A gang holding devices as the store has it, with the cluster objects of its uid."""

    row: snapshot.JobColumns
    placement: tuple[model.ReplicaPlacement, ...]
    gang: lifecycle.Gang


@dataclass(frozen=True, slots=True)
class _Ended:
    """A gang whose teardown is complete, waiting for the step's store transaction."""

    held: Held
    verdict: lifecycle.Verdict
    context: lifecycle.Context


@dataclass(frozen=True, slots=True)
class _Facts:
    """What every gang of a step reads from the same inventory."""

    inventory: model.Inventory
    evicting_devices: frozenset[str]


def _facts(inventory: model.Inventory) -> _Facts:
    return _Facts(
        inventory=inventory,
        evicting_devices=frozenset(d for d, dev in inventory.devices.items() if dev.is_evicting),
    )


_facts_of = derived.PerInventory(_facts)
"""A pass over every device when the inventory changes, not at every step."""


def by_replica(objs: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for obj in objs:
        label = ((obj.get("metadata") or {}).get("labels") or {}).get(objects.REPLICA_LABEL, "")
        if label.isdigit():
            found[int(label)] = obj
    return found


def _growth(row: snapshot.JobColumns, grown_at: Mapping[int, datetime]) -> lifecycle.Growth | None:
    """The grow under way of a job's own gang, from its row (a scale-up gang never grows)."""
    if row.grown_from is None or row.id not in grown_at:
        return None
    return lifecycle.Growth(row.grown_from, timestamps.to_unix(grown_at[row.id]))


def _is_of(pod: dict[str, Any], admission: str) -> bool:
    """A pod belongs to this attempt (pods of an earlier gangq carry no attempt: theirs)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(objects.ADMISSION, admission) == admission)


class Gangs:
    """The gang side of a leader step; its memory is only a cache of what the cluster shows."""

    def __init__(
        self,
        view: cache.ClusterCache,
        *,
        settings: ControllerSettings,
        writes: leader.Fenced,
        clock: Callable[[], float],
        metrics: gangq_metrics.Metrics,
        actuator: Actuator,
        history: history.History,
        rows: liverows.LiveRows,
    ) -> None:
        """`rows` are the live rows the step's cycle keeps too (`snapshot.Views.rows`): read
        after the cycle, they bring only what it and others wrote since."""
        self.view = view
        self.rows = rows
        self.settings = settings
        self.writes = writes
        self.clock = clock
        self.metrics = metrics
        self.actuator = actuator
        self.history = history
        self.skews_ms: dict[str, int] = {}
        """Release skew per gang uid, shown in the job's status."""
        self.deadlines: dict[str, float] = {}
        self.endings: dict[tuple[str, str], lifecycle.Verdict] = {}
        """Teardowns under way, by (uid, admission): a teardown never changes its mind."""
        self.scaled_away: set[str] = set()
        """Scale-up gangs above the job's current replicas: torn down this step."""
        self.shrinking: dict[str, int] = {}
        """Gang uid -> replicas it keeps: the others are torn down, then released."""
        self.shrinks: dict[tuple[str, str], lifecycle.Verdict] = {}
        """Shrinks of elastic gangs under way, by (uid, admission): the loss and words are
        those of the moment it was decided, however many steps its teardown takes."""
        self._started: list[Held] = []
        self._ended: list[_Ended] = []
        self.grows = growing.Grows(
            actuator=actuator, writes=writes, clock=clock, settings=settings, metrics=metrics
        )

    async def load(self, session: AsyncSession) -> list[Held]:
        """Every gang holding devices, as the store and the caches show it now."""
        await self.rows.read(session)
        rows = self.rows.holding()
        placements = self.rows.placements()
        pods = self.view.by_gang(resources.PODS)
        claims = self.view.by_gang(resources.RESOURCE_CLAIMS)
        groups = self.view.by_gang(resources.POD_GROUPS) if self.view.pod_groups else {}
        grown_at = await grows.started_at(
            session, [row.id for row in rows if row.grown_from is not None]
        )
        held = []
        for row in rows:
            key = snapshot.key_of(row)
            name, first = scale.split_name(row.name)
            placement = tuple(
                dataclasses.replace(p, replica=p.replica + first)
                for p in placements.get(row.id, ())
            )
            job = self.view.get(resources.TRAINING_JOBS, f"{row.namespace}/{name}")
            admission = (row.admitted_at or row.submitted_at).isoformat()
            mine = pods.get(row.uid, {}).values()
            gang = lifecycle.Gang(
                key=key,
                uid=row.uid,
                job_uid=scale.job_uid(row.uid),
                name=name,
                job=job,
                placement=placement,
                admitted_at=admission,
                is_running=row.started_at is not None,
                is_evicting=row.evicting,
                shrink_to=row.shrink_to,
                pods=by_replica([p for p in mine if _is_of(p, admission)]),
                claims=by_replica(claims.get(row.uid, {}).values()),
                stale_pods=by_replica([p for p in mine if not _is_of(p, admission)]),
                growing=_growth(row, grown_at),
                pod_groups={
                    (g.get("metadata") or {}).get("name", ""): g
                    for g in groups.get(row.uid, {}).values()
                },
            )
            held.append(Held(row=row, placement=placement, gang=gang))
        return held

    def _context(
        self,
        held: Held,
        spec: trainingjob.TrainingJobSpec | None,
        *,
        facts: _Facts,
        restarts: int,
    ) -> lifecycle.Context:
        tier = self.settings.tier(held.row.tier)
        admitted = timestamps.to_unix(held.row.admitted_at or held.row.submitted_at)
        timeout = float(spec.startup_timeout_seconds if spec else 600)
        evict_by = timestamps.optional_unix(held.row.evict_by) if held.row.evicting else None
        now = self.clock()
        # The step after a checkpoint request's deadline evicts the gang.
        if evict_by is not None and now < evict_by:
            self.deadlines[held.row.uid] = evict_by
        elif held.row.started_at is None:
            self.deadlines[held.row.uid] = admitted + timeout
        else:
            self.deadlines.pop(held.row.uid, None)
        bind_timeout = self.settings.pod_group_bind_timeout_s if self.view.pod_groups else math.inf
        if held.row.started_at is None and held.gang.pod_groups:
            # The step after a PodGroup's bind timeout tears the attempt down.
            unbound = lifecycle.unbound_since(held.gang, held.gang.pods.values())
            if unbound is not None and now < unbound + bind_timeout:
                self.deadlines[held.row.uid] = min(
                    self.deadlines.get(held.row.uid, math.inf), unbound + bind_timeout
                )
        requested = timestamps.optional_unix(held.row.checkpoint_requested_at)
        stored = timestamps.optional_unix(held.row.last_checkpoint_at)
        # Only a checkpoint request reads the annotation itself: the stored report may lag the
        # answer by a step, and no other verdict looks at the last checkpoint.
        reported = None
        if requested is not None and held.gang.job is not None:
            reported = checkpoints.reported(held.gang.job, now=now)[0].last_checkpoint_at
        return lifecycle.Context(
            now=now,
            long_running=bool(tier and tier.long_running),
            startup_timeout_s=timeout,
            admitted_at_s=admitted,
            restarts=restarts,
            max_restarts=spec.max_restarts if spec else 0,
            nodes=facts.inventory.nodes,
            evicting_devices=facts.evicting_devices,
            is_scaled_away=held.row.uid in self.scaled_away,
            started_at_s=timestamps.optional_unix(held.row.started_at),
            max_runtime_s=None if spec is None else spec.max_runtime_seconds,
            checkpoint_requested_at_s=requested,
            evict_by_s=evict_by,
            last_checkpoint_at_s=max(
                (at for at in (reported, stored) if at is not None), default=None
            ),
            bind_timeout_s=bind_timeout,
        )

    async def drive_all(
        self,
        held: list[Held],
        inventory: model.Inventory,
        records: Mapping[str, jobs.JobRecord],
    ) -> None:
        """Drive every holding gang concurrently; the cluster facts are read once per step."""
        facts = _facts_of(inventory)
        limit = asyncio.Semaphore(DRIVES_IN_FLIGHT)
        self._started, self._ended = [], []
        self.grows.undone = {}

        async def drive(h: Held) -> None:
            async with limit:
                with logconfig.about_job(h.row.namespace, h.gang.name):
                    await self._drive(h, facts, records)

        await asyncio.gather(*(drive(h) for h in held))
        await self._commit()

    async def _commit(self) -> None:
        """The step's starts and ends in one store transaction (one fence check and commit for
        a burst); when the batch is refused, each goes alone so one stale gang holds up none."""
        batch: list[tuple[Held, _Ended | None]] = [
            *[(h, None) for h in self._started],
            *[(e.held, e) for e in self._ended],
        ]
        if not batch:
            return
        learned: list[runs.Run] = []
        try:
            async with self.writes.transaction(changing=[h.row.uid for h, _ in batch]) as session:
                learned = await self._store(session, batch)
            done = batch
        except InvalidInputError:
            done, learned = [], []
            for one in batch:
                try:
                    async with self.writes.transaction(changing=[one[0].row.uid]) as session:
                        learned.extend(await self._store(session, [one]))
                    done.append(one)
                except InvalidInputError as error:
                    logger.warning("gang %s: store refused: %s", one[0].gang.key, error)
        for run in learned:
            self.history.learn(run)
        for h, ending in done:
            if ending is None:
                self.deadlines.pop(h.gang.uid, None)
        await asyncio.gather(*(self._ended_with(e) for _, e in done if e is not None))

    async def _store(
        self, session: AsyncSession, batch: list[tuple[Held, _Ended | None]]
    ) -> list[runs.Run]:
        """Starts and ends in the caller's transaction, the starts and the gangs that ended
        for good each in one go; an end that is a run (module `history`) is recorded with it
        and returned, to be learned once committed."""
        now, actor = self.clock(), self.settings.actor
        starts = [
            jobs.Start(held.gang.key, self.skews_ms.get(held.gang.uid))
            for held, ending in batch
            if ending is None
        ]
        await jobs.start_all(session, starts, at=now, actor=actor)
        finished: list[jobs.Ending] = []
        for held, ending in batch:
            if ending is None:
                continue
            gang = held.gang
            verdict, context = ending.verdict, ending.context
            failures = [f.details() for f in verdict.failures]
            if verdict.ending not in QUEUED_AGAIN:
                finished.append(
                    jobs.Ending(
                        gang.key,
                        succeeded=verdict.ending is lifecycle.Ending.SUCCEEDED,
                        reason=verdict.reason,
                        cause=status.condition_reason(verdict.cause),
                        failures=failures,
                    )
                )
                continue
            backoff, waiting = 0.0, None
            if verdict.ending is lifecycle.Ending.REQUEUE:
                backoff = min(
                    self.settings.restart_backoff_s * 2**context.restarts,
                    self.settings.restart_backoff_max_s,
                )
            elif verdict.ending is lifecycle.Ending.REFUSED:
                backoff = verdict.backoff_s
                waiting = explain.PendingReason(explain.ReasonCode.CONTROLLER, verdict.reason)
            await jobs.requeue(
                session,
                gang.key,
                at=now,
                actor=actor,
                reason=verdict.reason,
                preempted=verdict.ending is lifecycle.Ending.PREEMPTED,
                backoff_s=backoff,
                failures=failures,
                waiting=waiting,
                lost_device_s=verdict.lost_device_s,
            )
        await jobs.finish_all(session, finished, at=now, actor=actor)
        for ended in finished:
            if ended.reason.startswith(INVALID):
                await refusals.mark_refused(
                    session, ended.key, message=ended.reason.removeprefix(INVALID)
                )
        learned: list[runs.Run] = []
        for held, ending in batch:
            if ending is None:
                continue
            tier = self.settings.tier(held.row.tier)
            long_running = bool(tier and tier.long_running)
            run = history.run_of(held.row, ending.verdict, now=now, long_running=long_running)
            if run is not None:
                learned.append(run)
        await runs.record(session, learned)
        return learned

    async def _read_claims(self, gang: lifecycle.Gang) -> lifecycle.Gang:
        """The gang's claims read from the API server, not the watch cache: each kind has
        its own watch, and a claims watch that lags (a dropped stream, a relist under way)
        would show a released gang's claims missing or unallocated while its pods are seen.
        Ending the gang on that would release its devices while the claims still hold them."""
        namespace = gang.key.split("/", 1)[0]
        fresh: dict[int, dict[str, Any]] = {}
        for placement in gang.placement:
            name = objects.replica_name(gang.name, placement.replica)
            try:
                claim = await self.actuator.kube.get(resources.RESOURCE_CLAIMS, namespace, name)
            except KubeError as error:
                if error.status != 404:
                    raise
                continue
            labels = (claim.get("metadata") or {}).get("labels") or {}
            if labels.get(objects.GANG_LABEL) == gang.uid:
                fresh[placement.replica] = claim
        return dataclasses.replace(gang, claims=fresh)

    async def _read_nodes(
        self, verdict: lifecycle.Verdict, context: lifecycle.Context
    ) -> lifecycle.Context:
        """The failed replicas' nodes read from the API server, not the inventory, before a
        teardown says why: the taint that made kube-controller-manager evict a pod was written
        before the eviction, but the nodes watch may show it after the pods watch shows the pod
        gone. A node the server no longer has is left out (it was deleted)."""
        nodes = dict(context.nodes)
        for name in {f.node for f in verdict.failures if f.node}:
            try:
                node = await self.actuator.kube.get(resources.NODES, "", name)
            except KubeError as error:
                if error.status == 404:
                    nodes.pop(model.NodeName(name), None)
                continue
            nodes[model.NodeName(name)] = inventory_builder.node_from_dict(node)
        return dataclasses.replace(context, nodes=nodes)

    async def _drive(
        self, held: Held, facts: _Facts, records: Mapping[str, jobs.JobRecord]
    ) -> None:
        inventory = facts.inventory
        gang = held.gang
        spec: trainingjob.TrainingJobSpec | None = None
        if gang.job is not None:
            try:
                spec = trainingjob.parse_spec(dict(gang.job))
            except InvalidInputError:
                spec = None
        record = records.get(gang.uid)
        context = self._context(held, spec, facts=facts, restarts=record.restarts if record else 0)
        if gang.growing is not None:
            # The step after the added replicas' startup deadline undoes the grow.
            deadline = gang.growing.started_at_s + context.startup_timeout_s
            if context.now < deadline:
                self.deadlines[gang.uid] = deadline
        memo = (gang.uid, gang.admitted_at)
        keep = self.shrinking.get(gang.uid)
        ending = self.endings.get(memo)
        if keep is not None and ending is None:
            # A scale-down finishes first: its leaving replicas must not read as failures.
            try:
                await self._shrink(held, keep=keep)
            except (KubeError, InvalidInputError) as error:
                logger.warning("gang %s: scale-down failed: %s", gang.key, error)
            return
        verdict = ending or lifecycle.assess(gang, context)
        if ending is None and any(f.cause == lifecycle.CLAIM_CHANGED for f in verdict.failures):
            gang = await self._read_claims(gang)
            held = dataclasses.replace(held, gang=gang)
            verdict = lifecycle.assess(gang, context)
        if ending is None and any(
            f.cause in lifecycle.WORDED_FROM_THE_NODE for f in verdict.failures
        ):
            context = await self._read_nodes(verdict, context)
            verdict = lifecycle.assess(gang, context)
        verdict = self.grows.decided(gang, verdict)
        if verdict.action is lifecycle.Action.TEARDOWN:
            self.endings[memo] = verdict
        elif verdict.action is lifecycle.Action.SHRINK:
            verdict = self.shrinks.setdefault(memo, verdict)
        try:
            await self._carry_out(held, verdict, inventory=inventory, context=context)
        except (KubeError, InvalidInputError) as error:
            logger.warning("gang %s: %s failed: %s", gang.key, verdict.action, error)

    async def _shed(self, held: Held, *, keep: int) -> bool:
        """One pass of taking a gang down to replicas 0..keep-1 (rule 13: a removed replica's
        pods gone before its devices are reused): the pods of the others go first, their
        claims once no pod of theirs runs. Pods of the kept replicas that are still gated go
        too: built for the old size, they are made again for the new one. True once none is
        left, the claims read from the API server (as before any release of devices)."""
        gang = held.gang
        leaving = tuple(p for p in held.placement if p.replica >= keep)
        gated = [pod for r, pod in gang.pods.items() if r < keep and lifecycle.is_gated(pod)]
        done = await self.actuator.teardown(
            namespace=gang.key.partition("/")[0],
            gang=None,
            pods=[*(gang.pods[p.replica] for p in leaving if p.replica in gang.pods), *gated],
            claims=[gang.claims[p.replica] for p in leaving if p.replica in gang.claims],
        )
        if not done or not leaving:
            return done
        left = await self._read_claims(dataclasses.replace(gang, placement=leaving))
        return not left.claims

    async def _shrink(self, held: Held, *, keep: int) -> None:
        """Scale-down of the job's own gang: the replicas from `keep` on are torn down (pods
        first), then the store releases their devices; the others keep running."""
        gang = held.gang
        if not any(p.replica >= keep for p in held.placement):
            return
        if not await self._shed(held, keep=keep):
            return
        async with self.writes.transaction(changing=[held.row.uid]) as session:
            freed = await jobs.shrink(
                session, gang.key, replicas=keep, at=self.clock(), actor=self.settings.actor
            )
        if gang.job is not None:
            message = f"scaled down to {keep} replicas, {freed} devices released"
            await self.actuator.event(gang.job, "ScaledDown", message, warning=False)

    async def _resize(self, held: Held, verdict: lifecycle.Verdict) -> None:
        """An elastic gang chosen to shrink: once its leaving replicas have no pod or claim
        left, one store transaction releases their devices and records the loss; the gang
        runs on, and the next step tells its pods their new size (`Action.ANNOUNCE_SIZE`)."""
        gang = held.gang
        keep = gang.shrink_to
        assert keep is not None
        if not await self._shed(held, keep=keep):
            return
        async with self.writes.transaction(changing=[held.row.uid]) as session:
            freed = await jobs.shrunk(
                session,
                gang.key,
                reason=verdict.reason,
                lost_device_s=verdict.lost_device_s or 0.0,
                at=self.clock(),
                actor=self.settings.actor,
            )
        self.shrinks.pop((gang.uid, gang.admitted_at), None)
        gangq_metrics.record_resize(self.metrics, held.row.tier, outcome="shrunk")
        logger.info("gang %s: %s, %d devices released", gang.key, verdict.reason, freed)
        if gang.job is not None:
            lost_h = (verdict.lost_device_s or 0.0) / 3600.0
            message = f"{verdict.reason}, {freed} devices released, lost {lost_h:.3f} device-h"
            await self.actuator.event(gang.job, SHRUNK, message, warning=False)

    async def _carry_out(
        self,
        held: Held,
        verdict: lifecycle.Verdict,
        *,
        inventory: model.Inventory,
        context: lifecycle.Context,
    ) -> None:
        gang = held.gang
        job_spec = dict((gang.job or {}).get("spec") or {})
        if verdict.action is lifecycle.Action.BUILD:
            if gang.job is None:
                return
            with retry.collecting() as refused:
                skew = await self.actuator.build(
                    gang, spec=job_spec, inventory=inventory, now=self.clock()
                )
            if refused:
                self._refused(held, refused)
                return
            if skew is not None:
                # The release shows in the status (phase, placement, releaseSkewMs): no event.
                self.skews_ms[gang.uid] = round(skew * 1000)
                gangq_metrics.observe_release_skew(self.metrics, skew)
        elif verdict.action is lifecycle.Action.MARK_RUNNING:
            self._started.append(held)
        elif verdict.action is lifecycle.Action.RESTART_IN_PLACE:
            await self.actuator.restart_in_place(gang, verdict.replicas, spec=job_spec)
        elif verdict.action is lifecycle.Action.REQUEST_CHECKPOINT:
            await self._request_checkpoint(held)
        elif verdict.action is lifecycle.Action.TEARDOWN:
            await self._teardown(held, verdict, context=context)
        elif verdict.action is lifecycle.Action.SHRINK:
            await self._resize(held, verdict)
        elif verdict.action is lifecycle.Action.ANNOUNCE_SIZE:
            await self.actuator.announce_size(gang, verdict.replicas)
        elif verdict.action in growing.GROW_ACTIONS:
            skew = await self.grows.carry_out(
                gang, verdict, inventory=inventory, tier=held.row.tier
            )
            if skew is not None:
                gangq_metrics.observe_release_skew(self.metrics, skew)

    async def _request_checkpoint(self, held: Held) -> None:
        """Ask the victim's pods for a checkpoint with the stored request time; the Event goes
        out only with the first annotation, so a retry or a new leader does not ask twice."""
        row, job = held.row, held.gang.job
        requested = timestamps.to_unix(row.checkpoint_requested_at)
        news = await self.actuator.request_checkpoint(held.gang, stamp=objects.rfc3339(requested))
        if news and job is not None:
            message = status.checkpoint_request(
                requested,
                timestamps.to_unix(row.evict_by),
                preemptor=row.evicted_for,
                shrink_to=row.shrink_to,
            )
            await self.actuator.event(job, status.CHECKPOINT_REQUESTED, message, warning=False)

    def _refused(self, held: Held, refused: retry.Refusals) -> None:
        """The API server refused a write of the gang for good: the gang is torn down, its
        devices released. When every refusal is the job's spec's (module `blame`), building
        it again cannot help: the job ends Failed with the server's words (editing the spec
        queues it again). Otherwise gangq is at fault (rule 14): the job is queued again,
        its reason naming the controller's problem, and waits as long as the refused write
        pauses (doubling per refusal, capped), so a refusal that lasts costs the API server
        a few requests an hour, and the job runs once the writes are accepted again."""
        gang = held.gang
        ours = sorted(
            (r for r in refused.found if not blame.is_the_jobs(r.error)), key=lambda r: r.what
        )
        if ours:
            reason = blame.controller_reason(ours[0].what, ours[0].error).message
            verdict = lifecycle.Verdict(
                lifecycle.Action.TEARDOWN,
                ending=lifecycle.Ending.REFUSED,
                reason=reason,
                cause=API_SERVER_REFUSED,
                backoff_s=max(retry.BACKOFF.remaining_s(r.what) for r in ours),
            )
        else:
            reason = f"{INVALID}the API server refused {'; '.join(refused.messages)}"
            verdict = lifecycle.Verdict(
                lifecycle.Action.TEARDOWN,
                ending=lifecycle.Ending.FAILED,
                reason=reason,
                failure="other",
            )
        logger.warning("gang %s: %s", gang.key, reason)
        self.endings[(gang.uid, gang.admitted_at)] = verdict

    async def _teardown(
        self, held: Held, verdict: lifecycle.Verdict, *, context: lifecycle.Context
    ) -> None:
        gang = held.gang
        done = await self.actuator.teardown(
            namespace=gang.key.split("/")[0],
            gang=gang.uid,
            pods=[*gang.pods.values(), *gang.stale_pods.values()],
            claims=list(gang.claims.values()),
            groups=self.view.pod_groups and (len(held.placement) > 1 or bool(gang.pod_groups)),
        )
        if done:
            # Only now may the store release the devices (rule 1): see `_commit`.
            self._ended.append(_Ended(held, verdict, context))

    async def _ended_with(self, ended: _Ended) -> None:
        """After the store released the gang: metrics, an event where one is needed, a log."""
        held, verdict = ended.held, ended.verdict
        gang, ending = held.gang, verdict.ending
        self.deadlines.pop(gang.uid, None)
        self.endings.pop((gang.uid, gang.admitted_at), None)
        self.shrinks.pop((gang.uid, gang.admitted_at), None)
        if verdict.failure and not gang.is_running:
            gangq_metrics.record_gang_start_failure(
                self.metrics, held.row.tier, reason=verdict.failure
            )
        if gang.job is not None and ending in EVENTFUL:
            # A success shows in the status alone: events are for what needs a look.
            await self.actuator.event(
                gang.job, status.condition_reason(verdict.cause), verdict.reason, warning=True
            )
        logger.info("gang %s ended (%s): %s", gang.key, ending, verdict.reason)
