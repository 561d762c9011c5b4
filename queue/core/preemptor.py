"""The preemption phase of the cycle: which gangs a blocked job may evict, and holding the
place it will get once they are gone (rule 6).

Victim choice itself is in `preemption`; this module feeds it candidates in an order that keeps
searches short (by domain for Required topology, by node for one replica), decides whether the
eviction pays (`weigh`) and records the outcome in the cycle state. No I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from gangq.queue.core import elastic, explain, placement, preemption
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import (
    JobKey,
    NodeName,
    PendingJob,
    Preemption,
    RunningJob,
    Topology,
    TopologyMode,
    Victim,
)
from gangq.queue.core.state import CycleState, Room
from gangq.queue.core.supply import Supply


def try_preempt(
    job: PendingJob,
    shape: placement.Shape,
    *,
    state: CycleState,
    may_reclaim: bool,
    excluded: frozenset[DeviceId],
    held_room: dict[NodeName, Room],
) -> bool:
    """Phase 2c: find the cheapest victims and evict them if that pays (`weigh`); on success
    hold the job's place for the rest of the cycle. True when the job's pending reason is
    recorded: victims held, or (for a borrower) found victims that would not leave the devices
    owed to tenants within nominal. When eviction does not pay, the job's reason says so but
    False is returned: the cycle still gives it a reservation."""
    tier = state.tiers[job.tier]
    rights = preemption.Rights(
        job=job,
        rank=tier.rank,
        tier=tier.name,
        may_reclaim=may_reclaim,
        by_loss=tier.always_preempts,
    )
    memo_key = (shape, tier.rank, job.tenant if may_reclaim else "")
    if memo_key in state.unpreemptable or state.budget.is_exhausted:
        return False
    if not state.is_possible(shape):
        state.unpreemptable.add(memo_key)
        return False
    known = state.unpaid.get(memo_key)
    if known is not None:
        state.pending[job.key] = known
        return False
    found = _find(job, shape, rights=rights, state=state, excluded=excluded, held_room=held_room)
    if found is None:
        if not state.budget.is_exhausted:
            state.unpreemptable.add(memo_key)
        return False
    victims, choice, evicting = found
    unpaid = weigh(
        job,
        shape,
        victims=victims,
        choice=choice,
        rights=rights,
        state=state,
        excluded=excluded,
        held_room=held_room,
    )
    if unpaid is not None:
        state.pending[job.key] = state.unpaid[memo_key] = unpaid
        return False
    keeps: dict[JobKey, int] = {}
    shrunk = _shrinks(
        shape, victims, evicting=evicting, state=state, excluded=excluded, held_room=held_room
    )
    if shrunk is not None:
        keeps, choice = shrunk
    leaving = [v if v.key not in keeps else elastic.split(v, keeps[v.key])[1] for v in victims]
    awaited = _awaited(choice, evicting=evicting)
    if not may_reclaim and _takes_owed(job, leaving=[*leaving, *awaited], state=state):
        return True
    _hold_for_preemptor(job, choice, victims=victims, awaited=awaited, state=state)
    tiers, now = state.tiers, state.now
    reasons = (preemption.victim_reason(v, rights=rights, tiers=tiers, now=now) for v in victims)
    state.preemptions.append(
        Preemption(
            job=job.key,
            victims=tuple(
                Victim(
                    v.key,
                    (r or "")
                    if v.key not in keeps
                    else explain.shrunk(r or "", keep=keeps[v.key], size=v.size),
                    lost_device_s=v.lost_work_device_s(now, asked=False),
                    reclaim=preemption.is_reclaim(v, rights=rights, tiers=tiers, now=now),
                    keep=keeps.get(v.key),
                )
                for v, r in zip(victims, reasons, strict=True)
            ),
        )
    )
    return True


def _shrinks(
    shape: placement.Shape,
    victims: tuple[RunningJob, ...],
    *,
    evicting: list[RunningJob],
    state: CycleState,
    excluded: frozenset[DeviceId],
    held_room: dict[NodeName, Room],
) -> tuple[dict[JobKey, int], placement.Choice] | None:
    """Rule 13: an elastic victim gives back only the replicas the preemptor needs, highest
    first (replica 0 and its minimum stay), and keeps running instead of going back to the
    queue. Its cost is the eviction's (the whole gang re-forms from its checkpoint and
    restarts), so the victims chosen stay the cheapest; a shrink only spares the job its
    wait and the queue its restart from scratch. Per elastic victim in victim order, the
    largest size it may keep while the preemptor still fits; None when none can shrink."""
    elastic_victims = [
        v for v in victims if v.min_replicas is not None and v.size > max(v.min_replicas, 1)
    ]
    if not elastic_victims:
        return None
    supply = Supply(shape, state.pool, excluded=excluded, held_room=held_room)
    for gang in (*evicting, *victims):
        supply.add(gang)
    keeps: dict[JobKey, int] = {}
    for gang in elastic_victims:
        supply.remove(gang)
        for keep in range(gang.size - 1, max(gang.min_replicas or 1, 1) - 1, -1):
            leaving = elastic.split(gang, keep)[1]
            supply.add(leaving)
            if supply.fits():
                keeps[gang.key] = keep
                break
            supply.remove(leaving)
        else:
            supply.add(gang)
    choice = supply.choose() if keeps else None
    if not isinstance(choice, list):
        return None
    return keeps, choice


def _find(
    job: PendingJob,
    shape: placement.Shape,
    *,
    rights: preemption.Rights,
    state: CycleState,
    excluded: frozenset[DeviceId],
    held_room: dict[NodeName, Room],
) -> tuple[tuple[RunningJob, ...], placement.Choice, list[RunningJob]] | None:
    """The victims (cheapest for one replica, greedy by victim order for gangs), the place
    they free, and the gangs already evicting that the search counted on. With
    `Rights.by_loss` the candidates are taken least eviction cost first."""
    claimed, tiers, now, by_loss = state.claimed, state.tiers, state.now, rights.by_loss

    def eligible(gangs: list[RunningJob]) -> Iterator[RunningJob]:
        if by_loss:
            gangs = sorted(gangs, key=lambda gang: gang.eviction_cost_device_s(now, asked=False))
        for gang in gangs:
            if gang.key not in claimed and preemption.is_eligible(
                gang, rights=rights, tiers=tiers, now=now
            ):
                yield gang

    evicting = [g for g in state.evicting(job.device_class) if g.key not in claimed]
    if evicting or shape.replicas > 1:
        plan = _search_plan(shape, state=state) if shape.replicas > 1 else iter(())
        if evicting:
            # gangs already leaving may be enough on their own: then nobody else is evicted
            plan = itertools.chain([(shape, [], None)], plan)
        for search_shape, gangs, scope in plan:
            steps = state.budget.steps
            found = preemption.select_victims(
                search_shape,
                scope=scope,
                pool=state.pool,
                candidates=eligible(gangs),
                coming_free=evicting,
                excluded=excluded,
                held_room=held_room,
                budget=state.budget,
            )
            if found is not None and len(found[0]) > shape.replicas:
                # some node took several victims: clearing fewer nodes whole may cost less
                prefix = itertools.islice(
                    eligible(gangs), steps - state.budget.steps + preemption.CLEARANCE_EXTRA
                )
                ranks = {name: t.rank for name, t in tiers.items()}
                other = preemption.select_victims(
                    search_shape,
                    scope=scope,
                    pool=state.pool,
                    candidates=preemption.by_clearance(
                        prefix,
                        pool=state.pool,
                        selector=shape.selector,
                        ranks=ranks,
                        now=now,
                        by_loss=by_loss,
                    ),
                    coming_free=evicting,
                    excluded=excluded,
                    held_room=held_room,
                    budget=state.budget,
                )
                if other is not None and _order(
                    other[0], ranks=ranks, state=state, by_loss=by_loss
                ) < _order(found[0], ranks=ranks, state=state, by_loss=by_loss):
                    found = other
            if found is not None:
                return found[0], found[1], evicting
            if state.budget.is_exhausted:
                return None
        if shape.replicas > 1:
            return None
    ranks = {name: t.rank for name, t in tiers.items()}
    best: tuple[tuple[RunningJob, ...], placement.Choice, preemption.Cost] | None = None
    compared = 0
    for gangs, nodes in _victims_by_node(shape, state=state, by_loss=by_loss):
        (node,) = nodes
        if _is_spoiled(node, shape, state=state):
            continue
        found_here = preemption.cheapest_on_node(
            shape,
            node=node,
            pool=state.pool,
            candidates=list(eligible(gangs)),
            ranks=ranks,
            now=now,
            coming_free=evicting,
            excluded=excluded,
            held_room=held_room,
            budget=state.budget,
            by_loss=by_loss,
        )
        if state.budget.is_exhausted:
            break
        if found_here is None:
            continue
        if best is None or preemption.order_of(
            found_here[2], by_loss=by_loss
        ) < preemption.order_of(best[2], by_loss=by_loss):
            best = found_here
        compared += 1
        if compared >= NODES_COMPARED:
            break
    if best is None:
        return None
    return best[0], best[1], evicting


def _order(
    gangs: tuple[RunningJob, ...], *, ranks: dict[str, int], state: CycleState, by_loss: bool
) -> preemption.Order:
    cost = preemption.set_cost(gangs, ranks=ranks, now=state.now, by_loss=by_loss)
    return preemption.order_of(cost, by_loss=by_loss)


NODES_COMPARED = 8
"""A one-replica preemptor compares the cheapest victim sets of up to this many nodes (the
most promising first, `_victims_by_node`); on the reference cluster that is every node."""


def weigh(
    job: PendingJob,
    shape: placement.Shape,
    *,
    victims: tuple[RunningJob, ...],
    choice: placement.Choice,
    rights: preemption.Rights,
    state: CycleState,
    excluded: frozenset[DeviceId],
    held_room: dict[NodeName, Room],
) -> explain.PendingReason | None:
    """Rule 6, preempt only when it pays. None: evict; else the reason the job waits instead.

    An eviction costs the victims' `eviction_cost_device_s` (lost work, restart, work lost
    to earlier evictions). Waiting costs device-time too, and the eviction pays once what
    waiting has already cost, times `Policy.preemption_cost_factor`, reaches that: ski
    rental, which bets on no prediction (heavy-tailed runtimes are wrong by days), so an
    eviction never destroys more than waiting had cost, and the two together never more
    than twice the better of waiting and evicting at once, whenever the devices come free.
    - No victims (only gangs already evicting) or a tier that always preempts (prod
      inference): evict, the victims being the cheapest found.
    - A reclaim of nominal quota (every victim goes only because the job's tenant is under
      nominal): waiting costs the device-time the tenant has been kept from its nominal
      quota, of which a reclaim spends its own job's share: its devices x the time since it
      last entered the queue or last evicted (`PendingJob.paying_since`). A cycle sees no
      history: a budget of the tenant's whole kept time would be spent again by the reclaim
      of each of its other waiting jobs, cycle after cycle (on a week shaped like PAI, one
      borrower was evicted six times by the same tenant's reclaims), while each job's wait
      pays for one eviction only.
    - A preemption by tier, or one whose victims go partly by tier: waiting costs the free
      devices of the job's place (`choice`), which stand idle while it waits for the rest,
      each since it came free or the job queued or last evicted, whichever is later
      (`Snapshot.free_since`, `PendingJob.paying_since`): a device freed a minute ago has
      idled a minute, however long the job has waited. Where its place is all taken,
      nothing idles: it waits for those gangs to end. Once that pays, it still waits when
      the devices are predicted to free before the idle ones would have cost as much
      (`backfill.earliest_start`): a prediction that is wrong can only delay an eviction,
      never make one. The jobs of one shape and tier share the first one's verdict within
      a cycle.
    """
    tier = state.tiers[job.tier]
    if not victims or tier.always_preempts:
        return None
    now = state.now
    cost = sum(v.eviction_cost_device_s(now) for v in victims)

    def expected_wait() -> float | None:
        start = state.expected_start(shape, excluded=excluded, held_room=held_room)
        return None if start is None else start - now

    # one victim that may go only by reclaim (a borrower that started a minute ago, too young
    # to go by tier) does not make the others' eviction a reclaim: on a week shaped like PAI
    # such a victim let a 1 x 8 job's two days of wait pay for 7 small jobs that had run
    # hours, which by tier were evicted only once their place had idled as long
    if all(preemption.is_reclaim(v, rights=rights, tiers=state.tiers, now=now) for v in victims):
        kept, rate = job.device_count * max(now - job.paying_since, 0.0), job.device_count
        pays, evict_in = _rent(victims, cost=cost, kept=kept, rate=rate, state=state)
        if pays:
            return None
        return explain.reclaim_patience(
            tenant=job.tenant,
            kept_device_h=kept / 3600.0,
            cost_device_h=cost / 3600.0,
            evict_in_s=evict_in,
            free_in_s=expected_wait(),
        )
    idle, idled = state.idled(job, choice)
    pays, evict_in = _rent(victims, cost=cost, kept=idled, rate=idle, state=state)
    if pays:
        factor, wait = state.policy.preemption_cost_factor, expected_wait()
        if wait is None or math.isinf(factor) or cost <= factor * idle * wait:
            return None
        return explain.waiting_is_cheaper(
            victims=tuple(v.key for v in victims),
            cost_device_h=cost / 3600.0,
            idle=idle,
            idle_device_h=idle * wait / 3600.0,
            free_in_s=wait,
        )
    return explain.preemption_does_not_pay(
        victims=tuple(v.key for v in victims),
        cost_device_h=cost / 3600.0,
        idle=idle,
        idled_device_h=idled / 3600.0,
        evict_in_s=evict_in,
        free_in_s=expected_wait(),
    )


def _rent(
    victims: tuple[RunningJob, ...], *, cost: float, kept: float, rate: int, state: CycleState
) -> tuple[bool, float | None]:
    """The ski-rental test of `weigh`: whether evicting pays now, after `kept` device-seconds
    of waiting that grow by `rate` devices; if not, in how long it may first pay. The cost
    grows with the unsaved work of victims that declare no checkpoint interval (never pays,
    None, if that grows as fast) and falls back at each checkpoint of those that do, so the
    earliest is when the wait covers their cost without that work, or their next
    checkpoint. A victim asked first loses at most its grace whatever it declares: its cost
    stays put. The cycle at that time weighs again."""
    factor, now = state.policy.preemption_cost_factor, state.now
    if math.isinf(factor) or cost <= factor * kept:
        return True, None
    unasked = [v for v in victims if v.checkpoint_grace_s is None]
    saving = [v for v in unasked if v.checkpoint_interval_s is not None]
    growth = sum(v.device_count for v in unasked if v.checkpoint_interval_s is None)
    floor = cost - sum(v.lost_work_device_s(now) for v in saving)
    evict_in = None
    if factor * rate > growth:
        evict_in = max(floor - factor * kept, 0.0) / (factor * rate - growth)
        if evict_in == 0.0:
            evict_in = min(_next_checkpoint_in(v, now=now) for v in saving)
        if evict_in > 0.0:
            state.note_decision_at(now + evict_in)
    return False, evict_in


def _next_checkpoint_in(gang: RunningJob, *, now: float) -> float:
    """Seconds until the gang's next checkpoint is due by its interval (0 when overdue)."""
    since = now - max(gang.started_at, gang.last_checkpoint_at or gang.started_at)
    return max((gang.checkpoint_interval_s or 0.0) - since, 0.0)


def _search_plan(
    shape: placement.Shape, *, state: CycleState
) -> Iterator[tuple[placement.Shape, list[RunningJob], frozenset[NodeName] | None]]:
    """Candidate groups (and the nodes they concern) to search in turn: one domain at a time
    for topology (Preferred tries whole domains before the cluster), one node at a time for
    one replica, else the whole cluster."""
    mode = shape.topology.mode
    if mode is not TopologyMode.NONE and shape.replicas > 1:
        in_domain = shape._replace(topology=Topology(shape.topology.key, TopologyMode.REQUIRED))
        capable = state.pool.capable_nodes(shape.selector, shape.devices_per_replica)
        for gangs, nodes in _victims_by_promise(in_domain, state=state):
            usable = [n for n in nodes & capable if not _is_spoiled(n, shape, state=state)]
            if len(usable) >= shape.replicas:
                yield in_domain, gangs, nodes
        if mode is TopologyMode.REQUIRED:
            return
    yield shape, state.victims_in_order(shape.selector[0]), None


Group = tuple[list[RunningJob], frozenset[NodeName]]
"""Victim candidates in victim order, and the nodes a search over them should look at."""


def _is_spoiled(node: NodeName, shape: placement.Shape, *, state: CycleState) -> bool:
    """This cycle already gave some of the node's devices away (an admission or a preemptor),
    and the shape needs every matching device the node has: no eviction can help there."""
    return node in state.touched_nodes and shape.devices_per_replica >= state.pool.matching_count(
        shape.selector, node
    )


def _victims_by_promise(shape: placement.Shape, *, state: CycleState) -> list[Group]:
    """Required topology: victims grouped by domain, the domains with the most free matching
    devices first, so a search usually ends in its first domain instead of sweeping them all.
    The order is computed once per cycle and shape (it only guides the search)."""
    cache_key = (shape.selector, shape.devices_per_replica, shape.replicas, shape.topology.key)
    cached = state.domain_orders.get(cache_key)
    if cached is not None:
        return cached
    key, nodes = shape.topology.key, state.snapshot.inventory.nodes
    free: dict[str, int] = {}
    for node, devices in state.pool.view(shape.selector).by_node.items():
        domain = nodes[node].labels.get(key)
        if domain is not None:
            free[domain] = free.get(domain, 0) + len(devices)
    capable: dict[str, int] = {}
    for node in state.pool.capable_nodes(shape.selector, shape.devices_per_replica):
        domain = nodes[node].labels.get(key)
        if domain is not None:
            capable[domain] = capable.get(domain, 0) + 1
    by_domain = state.victims_by_domain(shape.selector[0], key)
    order = sorted(
        (d for d in by_domain if capable.get(d, 0) >= shape.replicas),
        key=lambda domain: (-free.get(domain, 0), domain),
    )
    members = state.domain_members(key)
    groups = [(by_domain[domain], members[domain]) for domain in order]
    state.domain_orders[cache_key] = groups
    return groups


def _victims_by_node(shape: placement.Shape, *, state: CycleState, by_loss: bool) -> list[Group]:
    """One replica: victims grouped by node, nodes with the lowest tiers to disturb first (with
    `by_loss`, the least work to lose), then the most free matching devices; a search ends on
    its first usable node instead of sweeping the cluster. The order is computed once per
    cycle and shape (it only guides the search)."""
    cache_key = (shape.selector, shape.devices_per_replica, by_loss)
    cached = state.node_orders.get(cache_key)
    if cached is not None:
        # nodes whose gangs are all claimed stay so for the rest of the cycle: drop them
        exhausted = 0
        while exhausted < len(cached) and all(g.key in state.claimed for g in cached[exhausted][0]):
            exhausted += 1
        del cached[:exhausted]
        return cached
    view = state.pool.view(shape.selector)
    by_node = state.victims_by_node(shape.selector[0])
    capable = state.pool.capable_nodes(shape.selector, shape.devices_per_replica)

    losses = state.losses_by_node(shape.selector[0]) if by_loss else {}

    def promise(node: NodeName) -> tuple[float, int, str]:
        free = -len(view.by_node.get(node, ()))
        if by_loss:
            return (losses[node], free, node)
        ranks = [state.tiers[g.tier].rank if g.tier in state.tiers else 0 for g in by_node[node]]
        return (max(ranks, default=0), free, node)

    order = sorted((n for n in by_node if n in capable), key=promise)
    groups = [(by_node[node], frozenset((node,))) for node in order]
    state.node_orders[cache_key] = groups
    return groups


def _awaited(choice: placement.Choice, *, evicting: list[RunningJob]) -> list[RunningJob]:
    """The gangs already evicting whose devices the preemptor's placement uses."""
    used = {device.id for _, devices in choice for device in devices}
    return [
        gang
        for gang in evicting
        if any(d in used for replica in gang.placement for d in replica.devices)
    ]


def _takes_owed(job: PendingJob, *, leaving: list[RunningJob], state: CycleState) -> bool:
    """A borrowing preemptor must, once `leaving` is gone, still leave free what tenants within
    nominal are owed, counting the gangs it evicts from them: else it could not get the
    devices it evicts for, and the victims would evict it back. Records the reason if so."""
    free = state.pool.free_count(job.device_class)
    coming = sum(g.device_count for g in leaving if g.device_class == job.device_class)
    owed = state.owed.to_others(job.tenant, job.device_class, evicted=leaving)
    if free + coming - job.device_count >= owed:
        return False
    state.pending[job.key] = explain.owed(
        tenant=job.tenant,
        needed=job.device_count,
        free=free + coming,
        owed=owed,
        device_class=job.device_class,
    )
    return True


def _hold_for_preemptor(
    job: PendingJob,
    choice: placement.Choice,
    *,
    victims: tuple[RunningJob, ...],
    awaited: list[RunningJob],
    state: CycleState,
) -> None:
    """The devices the preemptor will get stay off limits to later jobs of this cycle."""
    state.claimed.update(v.key for v in victims)
    state.claimed.update(g.key for g in awaited)
    state.touched_nodes.update(node for node, _ in choice)
    selector = placement.Shape.of(job).selector
    for node, devices in choice:
        free = [d for d in devices if d.id in state.pool.free]
        shares = state.pool.shares_of(selector, free)
        state.pool.take(node, [d.id for d in free], job.pod, shares=shares)
    state.book.charge(job.tenant, job.device_class, job.equivalent_milli)
    state.owed.settle(job)
    state.pending[job.key] = explain.preemption(
        victims=tuple(v.key for v in victims) or tuple(g.key for g in awaited),
        cost_device_h=sum(v.eviction_cost_device_s(state.now) for v in victims) / 3600.0,
    )
