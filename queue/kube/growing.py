"""Carrying out the grow of a running elastic gang (rule 13), from committed store state.

Owns the three steps `lifecycle.assess` asks of a growing gang: build and release the added
replicas, end the grow in the store once they all run, or undo it (the added pods, then their
claims, go; only then does the store release their devices, rule 1). An undo once decided is
carried through: the pods it deletes must not read as replicas to build.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings
from gangq.queue.core import model
from gangq.queue.kube import lifecycle, objects, retry
from gangq.queue.kube.actuator import Actuator
from gangq.queue.store import grows, leader

logger = logging.getLogger(__name__)
GROW_ACTIONS = frozenset(
    {lifecycle.Action.GROW, lifecycle.Action.GROWN, lifecycle.Action.UNDO_GROW}
)
GROWN = "Grown"
GROW_FAILED = "GrowFailed"
"""Reasons of the Events a grow's end gets on its TrainingJob."""


class Grows:
    """The grow side of a leader step; its memory is the undos under way."""

    def __init__(
        self,
        *,
        actuator: Actuator,
        writes: leader.Fenced,
        clock: Callable[[], float],
        settings: ControllerSettings,
        metrics: gangq_metrics.Metrics,
    ) -> None:
        self.actuator = actuator
        self.metrics = metrics
        self.writes = writes
        self.clock = clock
        self.settings = settings
        self.undoing: dict[tuple[str, float], lifecycle.Verdict] = {}
        """Undos under way, by (gang uid, grow start): an undo never changes its mind."""
        self.undone: dict[str, int] = {}
        """Gang uid -> the size it runs on at, for the grows this step undid: the placement
        the step read holds the added replicas still, the status must not show them."""

    def decided(self, gang: lifecycle.Gang, verdict: lifecycle.Verdict) -> lifecycle.Verdict:
        """The verdict to carry out: an undo decided earlier in this grow stands, unless the
        whole gang is torn down (its teardown takes the added replicas too)."""
        if gang.growing is None:
            return verdict
        memo = (gang.uid, gang.growing.started_at_s)
        if verdict.action is lifecycle.Action.TEARDOWN:
            self.undoing.pop(memo, None)
            return verdict
        if verdict.action is lifecycle.Action.UNDO_GROW:
            self.undoing.setdefault(memo, verdict)
        return self.undoing.get(memo, verdict)

    async def carry_out(
        self,
        gang: lifecycle.Gang,
        verdict: lifecycle.Verdict,
        *,
        inventory: model.Inventory,
        tier: str,
    ) -> float | None:
        """One pass of the verdict's step; returns the release skew of added replicas
        released by this pass, None otherwise."""
        growth = gang.growing
        if growth is None or gang.job is None:
            return None
        if verdict.action is lifecycle.Action.GROW:
            return await self._build(gang, growth, inventory=inventory)
        if verdict.action is lifecycle.Action.GROWN:
            await self._grown(gang, growth, tier=tier)
        elif verdict.action is lifecycle.Action.UNDO_GROW:
            await self._undo(gang, growth, verdict, tier=tier)
        return None

    async def _build(
        self, gang: lifecycle.Gang, growth: lifecycle.Growth, *, inventory: model.Inventory
    ) -> float | None:
        """Build and release the added replicas. A write the API server refuses for good
        undoes the grow: the gang keeps running, and its job is not to blame (rule 14)."""
        spec = dict((gang.job or {}).get("spec") or {})
        with retry.collecting() as refused:
            skew = await self.actuator.grow(
                gang, added_from=growth.from_size, spec=spec, inventory=inventory, now=self.clock()
            )
        if refused:
            reason = (
                f"grow to {gang.size} failed: the API server refused {'; '.join(refused.messages)}"
            )
            logger.warning("gang %s: %s", gang.key, reason)
            verdict = lifecycle.Verdict(lifecycle.Action.UNDO_GROW, reason=reason)
            self.undoing[(gang.uid, growth.started_at_s)] = verdict
        return skew

    async def _grown(self, gang: lifecycle.Gang, growth: lifecycle.Growth, *, tier: str) -> None:
        """Every added replica runs: the store ends the grow. The pods that show the old size
        are told the new one from then on, as any gang's pods that show another size are
        (`lifecycle.Action.ANNOUNCE_SIZE`), by this leader or the next."""
        async with self.writes.transaction(changing=[gang.uid]) as session:
            ended = await grows.finish(
                session,
                gang.key,
                grown_from=growth.from_size,
                at=self.clock(),
                actor=self.settings.actor,
            )
        if ended:
            gangq_metrics.record_resize(self.metrics, tier, outcome="grown")
        if ended and gang.job is not None:
            message = f"grew from {growth.from_size} to {gang.size} replicas"
            await self.actuator.event(gang.job, GROWN, message, warning=False)
            logger.info("gang %s %s", gang.key, message)

    async def _undo(
        self,
        gang: lifecycle.Gang,
        growth: lifecycle.Growth,
        verdict: lifecycle.Verdict,
        *,
        tier: str,
    ) -> None:
        namespace = gang.key.partition("/")[0]
        added = [p.replica for p in gang.placement if p.replica >= growth.from_size]
        gone = await self.actuator.remove_replicas(
            namespace=namespace, job=gang.name, replicas=added, gang=gang.uid
        )
        if not gone:
            return
        group = objects.pod_group_name(
            gang.name, gang=gang.uid, admission=gang.admitted_at, replicas=added
        )
        if group in gang.pod_groups and not await self.actuator.delete_pod_group(namespace, group):
            return
        async with self.writes.transaction(changing=[gang.uid]) as session:
            freed = await grows.undo(
                session,
                gang.key,
                grown_from=growth.from_size,
                at=self.clock(),
                actor=self.settings.actor,
                reason=verdict.reason,
            )
        self.undoing.pop((gang.uid, growth.started_at_s), None)
        self.undone[gang.uid] = growth.from_size
        if freed:
            gangq_metrics.record_resize(self.metrics, tier, outcome="grow_undone")
        if freed and gang.job is not None:
            message = f"{verdict.reason}; running on at {growth.from_size} replicas"
            await self.actuator.event(gang.job, GROW_FAILED, message, warning=True)
            logger.info("gang %s: %s", gang.key, message)
