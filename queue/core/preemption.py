"""Preemption (rule 6): which whole gangs to evict so a job gets a complete placement.

Owns who may be a victim of whom (tier rank, minimum runtime, reclaim of nominal quota) and
`select_victims`: remove candidates in victim order until the job fits, then give back every
victim the placement does not need, newest first, so the set is minimal. Evicting is the
actuator's job; nothing here has side effects.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gangq.queue.core import explain, placement
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import NodeName, PendingJob, RunningJob, Tier
from gangq.queue.core.pool import Pool
from gangq.queue.core.supply import Supply


@dataclass(slots=True)
class SearchBudget:
    """Candidate gangs the victim searches of one cycle may still examine. Evictions take a
    grace period anyway, so a search cut short simply continues in a later cycle."""

    steps: int

    @property
    def is_exhausted(self) -> bool:
        return self.steps <= 0


@dataclass(frozen=True, slots=True)
class Rights:
    """What a preemptor may do: its tier rank, and whether it reclaims its tenant's nominal
    (a job that does not would borrow)."""

    job: PendingJob
    rank: int
    tier: str
    may_reclaim: bool


def is_eligible(
    victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float
) -> bool:
    """Rule 6: a lower tier once it ran its tier's minimum runtime; any tier when the
    preemptor reclaims its tenant's nominal quota from another tenant's borrowed use.

    A preemptor that would borrow takes only idle devices (PRODUCT §3), so of other tenants
    it evicts borrowed use only: their use within nominal would queue again owed its devices
    (module `owed`), the preemptor could not get them, and the two would evict each other."""
    return _by_tier(victim, rights=rights, tiers=tiers, now=now) or _by_reclaim(victim, rights)


def _by_tier(victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float) -> bool:
    tier = tiers.get(victim.tier)
    rank = tier.rank if tier is not None else 0
    minimum = tier.min_runtime_before_preemption_s if tier is not None else 0.0
    if not rights.may_reclaim and victim.borrowed == 0 and victim.tenant != rights.job.tenant:
        return False
    return rank < rights.rank and now - victim.started_at >= minimum


def _by_reclaim(victim: RunningJob, rights: Rights) -> bool:
    return rights.may_reclaim and victim.borrowed > 0 and victim.tenant != rights.job.tenant


def victim_reason(
    victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float
) -> str | None:
    """What the victim's owner is told, or None when `victim` may not be evicted."""
    if _by_tier(victim, rights=rights, tiers=tiers, now=now):
        return explain.preempted_by(
            preemptor=rights.job.key, preemptor_tier=rights.tier, victim_tier=victim.tier
        )
    if _by_reclaim(victim, rights):
        return explain.reclaimed(victim_tenant=victim.tenant, preemptor=rights.job.key)
    return None


def select_victims(
    shape: placement.Shape,
    *,
    pool: Pool,
    candidates: Iterable[RunningJob],
    coming_free: Iterable[RunningJob] = (),
    excluded: frozenset[DeviceId] = frozenset(),
    held_room: Mapping[NodeName, tuple[int, int, int]] | None = None,
    budget: SearchBudget | None = None,
    scope: Collection[NodeName] | None = None,
) -> tuple[tuple[RunningJob, ...], placement.Choice] | None:
    """A minimal set of whole gangs, from `candidates` in victim order, whose removal lets the
    shape fit; gangs already evicting (`coming_free`) count as free first. None if none does
    or the budget ran out first (then `budget.is_exhausted`). With `scope`, only those nodes
    (and nodes the candidates free) are considered: the caller knows no other node fits."""
    budget = budget if budget is not None else SearchBudget(steps=1 << 62)
    candidates = iter(candidates)
    first = next(candidates, None)
    leaving = list(coming_free)
    if first is None and not leaving:
        return None
    if first is not None:
        candidates = itertools.chain((first,), candidates)
    supply = Supply(shape, pool, excluded=excluded, held_room=held_room, scope=scope)
    for gang in leaving:
        supply.add(gang)
    chosen: list[RunningJob] = []
    if not supply.fits():
        for gang in candidates:
            budget.steps -= 1
            if budget.is_exhausted:
                return None
            if not supply.contributes(gang):
                continue
            supply.add(gang)
            chosen.append(gang)
            if supply.fits():
                break
        else:
            return None
        chosen = _on_chosen_nodes(chosen, supply=supply, pool=pool, shape=shape)
        chosen = _give_back(chosen, supply=supply)
    choice = supply.choose()
    if not isinstance(choice, list):
        return None
    return tuple(chosen), choice


def _give_back(chosen: list[RunningJob], *, supply: Supply) -> list[RunningJob]:
    """Try each victim back, newest first, keeping only those the placement needs: no victim
    of the result can be spared (fits only grows as gangs leave, so one pass suffices)."""
    needed = [True] * len(chosen)
    for index in range(len(chosen) - 1, -1, -1):
        supply.remove(chosen[index])
        if supply.fits():
            needed[index] = False
        else:
            supply.add(chosen[index])
    return [gang for gang, keep in zip(chosen, needed, strict=True) if keep]


def _on_chosen_nodes(
    chosen: list[RunningJob], *, supply: Supply, pool: Pool, shape: placement.Shape
) -> list[RunningJob]:
    """Give back at once every victim off the nodes of a placement that already fits; the
    sweep in victim order often frees room elsewhere before the decisive node is free."""
    choice = supply.choose()
    if not isinstance(choice, list):
        return chosen
    nodes = {node for node, _ in choice}
    kept = []
    for gang in chosen:
        if any(node in nodes for node, _ in pool.held_matching(shape.selector, gang)):
            kept.append(gang)
        else:
            supply.remove(gang)
    return kept
