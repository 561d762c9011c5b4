"""Preemption (rule 6): which whole gangs to evict so a job gets a complete placement.

Owns who may be a victim of whom (tier rank, minimum runtime, reclaim of nominal quota), the
cost of a victim set (`set_cost`: tier, use within nominal, eviction cost) and the two searches:
`cheapest_on_node` enumerates the gangs of one node exactly (a one-replica preemptor), and
`select_victims` removes candidates in victim order until the job fits, then gives back every
victim the placement does not need, most expensive first, so the set is minimal; a gang of
several replicas also tries them node by node (`by_clearance`) and keeps the cheaper set.
Evicting is the actuator's job; nothing here has side effects.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gangq.queue.core import explain, placement
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import JobKey, NodeName, PendingJob, RunningJob, Tier
from gangq.queue.core.pool import Pool, SelectorKey
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
    by_loss: bool = False
    """A tier that always preempts skips the pays test (`preemptor.weigh`), so the work its
    victims lose is the only thing between it and a week's runs: it compares victim sets by
    that first (`order_of`). It does not count on the checkpoint a victim asked first saves
    (`RunningJob.lost_work_device_s`): that victim keeps it waiting for the save, so the
    promise must not draw it there; it weighs such a victim as one that goes at once."""


def is_eligible(
    victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float
) -> bool:
    """Rule 6: a lower tier once it ran its tier's minimum runtime; any tier when the
    preemptor reclaims its tenant's nominal quota from another tenant's borrowed use.

    A preemptor that would borrow takes only idle devices (PRODUCT §3), so of other tenants
    it evicts only gangs wholly borrowed: use within nominal, even part of a gang, would queue
    again owed its devices (module `owed`), held where the preemptor needs them, and the two
    would evict each other."""
    return _by_tier(victim, rights=rights, tiers=tiers, now=now) or _by_reclaim(victim, rights)


def _by_tier(victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float) -> bool:
    """A lower tier, once it ran its tier's minimum runtime. That protection against
    thrashing does not hold against a tier that always preempts (serving): it takes the
    cheapest victims, and a gang that has just started loses the least work, where a
    protected one could leave it only gangs that ran for hours."""
    tier = tiers.get(victim.tier)
    rank = tier.rank if tier is not None else 0
    minimum = tier.min_runtime_before_preemption_s if tier is not None else 0.0
    preemptor = tiers.get(rights.tier)
    if preemptor is not None and preemptor.always_preempts:
        minimum = 0.0
    if (
        not rights.may_reclaim
        and victim.borrowed < victim.device_count
        and victim.tenant != rights.job.tenant
    ):
        return False
    return rank < rights.rank and now - victim.started_at >= minimum


def _by_reclaim(victim: RunningJob, rights: Rights) -> bool:
    return rights.may_reclaim and victim.borrowed > 0 and victim.tenant != rights.job.tenant


def is_reclaim(
    victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float
) -> bool:
    """The victim may go only because the preemptor reclaims nominal quota (not by tier)."""
    return not _by_tier(victim, rights=rights, tiers=tiers, now=now) and _by_reclaim(victim, rights)


def victim_reason(
    victim: RunningJob, *, rights: Rights, tiers: Mapping[str, Tier], now: float
) -> str | None:
    """What the victim's owner is told, or None when `victim` may not be evicted."""
    # the work at stake, which a victim asked first saves only if it answers
    lost_h = victim.lost_work_device_s(now, asked=False) / 3600.0
    if _by_tier(victim, rights=rights, tiers=tiers, now=now):
        return explain.preempted_by(
            preemptor=rights.job.key,
            preemptor_tier=rights.tier,
            victim_tier=victim.tier,
            lost_device_h=lost_h,
        )
    if _by_reclaim(victim, rights):
        return explain.reclaimed(
            victim_tenant=victim.tenant, preemptor=rights.job.key, lost_device_h=lost_h
        )
    return None


Cost = tuple[int, int, float, int]
"""A victim set's cost (`set_cost`), compared as a tuple: lower is cheaper."""
NO_COST: Cost = (0, 0, 0.0, 0)
MAX_EXACT_GANGS = 8
"""`cheapest_on_node` enumerates all subsets of at most this many of a node's gangs (the
cheapest ones in victim order); a node holding more is rare (one gang per device at most)."""


Order = tuple[float, float, float, float]
"""A `Cost` in the order a preemptor compares it (`order_of`)."""


def order_of(cost: Cost, *, by_loss: bool) -> Order:
    """Rule 6 compares victim sets by `set_cost` as it is; a preemptor with `Rights.by_loss`
    by their eviction cost first, then the rest of it. Lower tiers and borrowed use still go
    first among sets that lose as much, but never a long run instead of a short one: evicting
    a node of week-long jobs to spare a gang that has just started protects nobody."""
    rank, nominal, lost, count = cost
    return (lost, rank, nominal, count) if by_loss else (rank, nominal, lost, count)


def gang_cost(gang: RunningJob, *, ranks: Mapping[str, int], now: float, by_loss: bool) -> Cost:
    return (
        ranks.get(gang.tier, 0),
        gang.device_count - gang.borrowed,
        gang.eviction_cost_device_s(now, asked=not by_loss),
        1,
    )


def set_cost(
    gangs: Iterable[RunningJob], *, ranks: Mapping[str, int], now: float, by_loss: bool
) -> Cost:
    """Rule 6 between victim sets, in this order: (1) the highest tier evicted; (2) devices
    evicted from use within nominal (borrowed use goes first); (3) eviction cost in
    device-seconds (`RunningJob.eviction_cost_device_s`, as `Rights.by_loss` counts it);
    (4) gangs evicted."""
    return _combine(gang_cost(g, ranks=ranks, now=now, by_loss=by_loss) for g in gangs)


def _combine(costs: Iterable[Cost]) -> Cost:
    rank = nominal = count = 0
    lost = 0.0
    for cost in costs:
        rank = max(rank, cost[0])
        nominal += cost[1]
        lost += cost[2]
        count += cost[3]
    return (rank, nominal, lost, count)


def cheapest_on_node(
    shape: placement.Shape,
    *,
    node: NodeName,
    pool: Pool,
    candidates: Sequence[RunningJob],
    ranks: Mapping[str, int],
    now: float,
    coming_free: Iterable[RunningJob] = (),
    excluded: frozenset[DeviceId] = frozenset(),
    held_room: Mapping[NodeName, tuple[int, int, int]] | None = None,
    budget: SearchBudget | None = None,
    by_loss: bool = False,
) -> tuple[tuple[RunningJob, ...], placement.Choice, Cost] | None:
    """One replica on `node`: the cheapest set (`set_cost`, in `order_of`) of the node's
    candidate gangs whose removal lets the replica fit, by exact enumeration. Sets are tried
    cheapest first (a proper subset is always cheaper), so the first that fits is minimal.
    None if no set fits or the budget ran out (then `budget.is_exhausted`)."""
    budget = budget if budget is not None else SearchBudget(steps=1 << 62)
    supply = Supply(shape, pool, excluded=excluded, held_room=held_room, scope=(node,))
    for gang in coming_free:
        supply.add(gang)
    if supply.fits():
        choice = supply.choose()
        return ((), choice, NO_COST) if isinstance(choice, list) else None
    gangs: list[RunningJob] = []
    on_node: list[int] = []
    for gang in candidates:
        count = sum(
            len(matching)
            for held_node, matching in pool.held_matching(shape.selector, gang)
            if held_node == node
        )
        if count and pool.is_accepted(node, shape.pod):
            gangs.append(gang)
            on_node.append(count)
            if len(gangs) == MAX_EXACT_GANGS:
                break
    needed = shape.devices_per_replica - len(supply.available(node))
    costs = [gang_cost(g, ranks=ranks, now=now, by_loss=by_loss) for g in gangs]
    # each subset's cost and devices extend those of the subset without its highest member,
    # adding members in index order as `_combine` does, so the costs compare exactly alike
    set_costs = [NO_COST] * (1 << len(gangs))
    counts = [0] * (1 << len(gangs))
    subsets: list[tuple[Cost, int]] = []
    for mask in range(1, 1 << len(gangs)):
        highest = mask.bit_length() - 1
        rest = mask ^ (1 << highest)
        before, added = set_costs[rest], costs[highest]
        cost = set_costs[mask] = (
            max(before[0], added[0]),
            before[1] + added[1],
            before[2] + added[2],
            before[3] + added[3],
        )
        count = counts[mask] = counts[rest] + on_node[highest]
        if count >= needed:
            subsets.append((cost, mask))
    subsets.sort(key=lambda subset: (order_of(subset[0], by_loss=by_loss), subset[1]))
    for cost, mask in subsets:
        if budget.is_exhausted:
            return None
        budget.steps -= 1
        chosen = [gangs[i] for i in range(len(gangs)) if mask >> i & 1]
        for gang in chosen:
            supply.add(gang)
        if supply.fits():
            choice = supply.choose()
            if isinstance(choice, list):
                return tuple(chosen), choice, cost
        for gang in chosen:
            supply.remove(gang)
    return None


CLEARANCE_EXTRA = 64
"""Candidates past those the victim-order search examined that `by_clearance` also weighs."""


def by_clearance(
    candidates: Iterable[RunningJob],
    *,
    pool: Pool,
    selector: SelectorKey,
    ranks: Mapping[str, int],
    now: float,
    by_loss: bool = False,
) -> list[RunningJob]:
    """The candidates grouped by node, the node cheapest to clear first (`set_cost` of the
    candidates holding matching devices there, in `order_of`), each gang once. A gang of
    several replicas needs whole nodes: the cheapest gangs one by one may each free half of
    another node and cost more together than clearing fewer nodes whole."""
    gangs = list(candidates)
    costs = {gang.key: gang_cost(gang, ranks=ranks, now=now, by_loss=by_loss) for gang in gangs}
    per_node: dict[NodeName, list[RunningJob]] = {}
    for gang in gangs:
        for node, matching in pool.held_matching(selector, gang):
            here = per_node.setdefault(node, [])
            if matching and gang not in here:
                here.append(gang)
    order = sorted(
        per_node,
        key=lambda node: (
            order_of(_combine(costs[g.key] for g in per_node[node]), by_loss=by_loss),
            node,
        ),
    )
    seen: set[JobKey] = set()
    ordered: list[RunningJob] = []
    for node in order:
        for gang in per_node[node]:
            if gang.key not in seen:
                seen.add(gang.key)
                ordered.append(gang)
    return ordered


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
    """Try each victim back, last in victim order (the most expensive) first, keeping only
    those the placement needs: no victim of the result can be spared (fits only grows as
    gangs leave, so one pass suffices)."""
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
