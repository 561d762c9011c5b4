"""The scheduling cycle: the single entry point of the decision core.

It reads a `Snapshot`, decides admissions, preemptions and backfill reservations, and explains
every job it leaves pending. Pure: no I/O, no clock; the same input gives the same output.
Phases: (1) set aside invalid jobs and jobs that can never fit (module `feasibility`), order
the rest (rule 4); (2) for each job check quota, then placement (respecting backfill holds),
then preemption (an elastic victim shrinks rather than goes, module `preemptor`), then a
reservation for the first blocked job of its tier; (3) record an admission, a victim set or a
pending reason; (4) number the pending; (5) grow running elastic gangs onto what is left.
A borrowing job also leaves alone what tenants waiting within nominal are owed (modules
`owed` and `borrowing`): without that, a reclaimed gang or the next borrower of a higher tier
would take the devices back from the reclaimer in the next cycle, and reclaims would repeat
forever.
"""

from __future__ import annotations

import bisect
import dataclasses
import math

from gangq.queue.core import (
    backfill,
    borrowing,
    elastic,
    explain,
    feasibility,
    ordering,
    placement,
    preemptor,
    sharing,
)
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import (
    Admission,
    BackfillReservation,
    CycleResult,
    Grow,
    NodeName,
    PendingJob,
    Policy,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
    Tenant,
    TopologyMode,
)
from gangq.queue.core.state import CycleState, Mask, Outcome, Room


def run_cycle(
    *, snapshot: Snapshot, policy: Policy, now: float, matcher: DeviceMatcher
) -> CycleResult:
    """Decide one cycle; `now` is unix seconds, `matcher` carries CEL results across cycles."""
    state = CycleState.build(snapshot, policy=policy, now=now, matcher=matcher)
    valid: list[PendingJob] = []
    invalid: list[tuple[PendingJob, explain.PendingReason]] = []
    checked: dict[tuple[object, ...], explain.PendingReason | None] = {}
    never_fit = feasibility.NeverFit(
        pool=state.pool, book=state.book, tiers=state.tiers, running=snapshot.running
    )
    pending = snapshot.pending
    if state.pool.partitioned:
        pending = tuple(state.pool.weighed(job) for job in pending)
    for job in pending:
        positive = job.replicas > 0 and job.devices_per_replica > 0
        keyless = not job.topology.key
        kind = (job.tier, job.device_class, job.selectors, job.topology.mode, keyless, positive)
        try:
            problem = checked[kind]
        except KeyError:
            problem = checked[kind] = feasibility.invalid_reason(
                job, policy=policy, inventory=snapshot.inventory, matcher=matcher
            )
        if problem is None:
            problem = never_fit.judge(elastic.smallest(job))
        if problem is None:
            valid.append(job)
        else:
            invalid.append((job, problem))
    _expect_owed(valid, state=state)
    ranks = {name: tier.rank for name, tier in state.tiers.items()}
    for job in ordering.in_queue_order(valid, ranks=ranks, shares=state.book):
        state.order.append(job.key)
        _decide(job, state=state)
    for job, problem in sorted(invalid, key=lambda item: (item[0].submitted_at, item[0].uid)):
        state.order.append(job.key)
        state.pending[job.key] = problem
    _grow(snapshot.growable, ranks=ranks, state=state)
    waiting = [
        key
        for key in state.order
        if key in state.pending and state.pending[key].code in explain.WAITING_CODES
    ]
    return CycleResult(
        admissions=tuple(state.admissions),
        preemptions=tuple(state.preemptions),
        pending=dict(state.pending),
        positions={key: index for index, key in enumerate(waiting, start=1)},
        reservations=tuple(h.reservation for h in state.holds),
        order=tuple(state.order),
        grows=tuple(state.grows),
        decide_again_at=state.decide_again_at,
    )


def _expect_owed(valid: list[PendingJob], *, state: CycleState) -> None:
    """Record the within-nominal demand borrowers must leave room for (module `owed`). Use
    does not change while this runs, so jobs alike in tenant, class, tier and size share one
    answer."""
    book = state.book
    counts: dict[tuple[str, str, str, sharing.Equivalent], bool] = {}

    def is_owed(job: PendingJob) -> bool:
        kind = (job.tenant, job.device_class, job.tier, job.equivalent_milli)
        counted = counts.get(kind)
        if counted is None:
            counted = counts[kind] = book.refusal(job) is None and book.is_within_nominal(
                job.tenant, job.device_class, job.equivalent_milli
            )
        return counted

    state.owed.expect([job for job in valid if is_owed(job)])


def _holds_for(job: PendingJob, *, state: CycleState) -> Mask:
    """Indexes of the reservations the job must respect (rule 5): those starting before it ends."""
    if not state.holds:
        return ()
    end = state.end_if_admitted(job)
    cache_key = (len(state.holds), end)
    mask = state.masks.get(cache_key)
    if mask is None:
        mask = tuple(i for i, h in enumerate(state.holds) if h.reservation.start_at < end)
        state.masks[cache_key] = mask
    return mask


def _merged(mask: Mask, *, state: CycleState) -> tuple[frozenset[DeviceId], dict[NodeName, Room]]:
    merged = state.merged_holds.get(mask)
    if merged is None:
        merged = backfill.merged([state.holds[i] for i in mask])
        state.merged_holds[mask] = merged
    return merged


def _decide(job: PendingJob, *, state: CycleState) -> None:
    """Phase 2 and 3 for one job: an elastic job's size first (module `elastic`: the gang
    it is decided as, all-or-nothing like any other), then quota, placement, and why it
    is blocked."""
    if not job.is_elastic:
        _decide_gang(job, state=state)
        return
    choice = elastic.start_size(
        job,
        fits=lambda size: _free_place(elastic.at_size(job, size), state=state) is not None,
        full_start=lambda: _full_start(job, state=state),
        long_running=state.tiers[job.tier].long_running,
        now=state.now,
    )
    _decide_gang(elastic.at_size(job, choice.size), state=state)
    waiting = choice.waiting
    if waiting is not None and job.key in state.pending:
        state.pending[job.key] = explain.waits_for_all_replicas(
            state.pending[job.key],
            replicas=job.replicas,
            size=waiting.size,
            full_end_in_s=waiting.full_end_at - state.now,
            small_end_in_s=waiting.small_end_at - state.now,
        )


def _may_reclaim(job: PendingJob, *, state: CycleState) -> bool:
    """The tenant stays within nominal with the job: it may reclaim (rule 6)."""
    return state.book.is_within_nominal(job.tenant, job.device_class, job.equivalent_milli)


def _fence(job: PendingJob, *, may_reclaim: bool, state: CycleState) -> Tenant | None:
    """A borrower's tenant while other tenants are owed devices (module `owed`), else None."""
    if may_reclaim or not state.owed.to_others(job.tenant, job.device_class):
        return None
    return job.tenant


def _free_place(
    job: PendingJob, *, state: CycleState, within: placement.NodeSubset | None = None
) -> placement.Choice | None:
    """Where the job would go now without evicting anyone (on the nodes `within` only, when
    given): its tenant may take it (rule 3), a borrower leaves what others are owed, and the
    placement leaves alone the backfill holds it must respect; None when it would not be
    admitted now."""
    if state.book.refusal(job) is not None:
        return None
    fence = _fence(job, may_reclaim=_may_reclaim(job, state=state), state=state)
    if fence is not None and not borrowing.leaves_owed(job, state=state):
        return None
    outcome = _place(
        placement.Shape.of(job), _holds_for(job, state=state), fence, state=state, within=within
    )
    if not isinstance(outcome, list) or _serving_refusal(job, outcome, state=state) is not None:
        return None
    return outcome


def _serving_refusal(
    job: PendingJob, choice: placement.Choice, *, state: CycleState
) -> explain.PendingReason | None:
    """Why the job may not take `choice`: it would leave a forecast serving scale-up no place
    to clear cheaply (module `serving`). Tiers that always preempt or run for good are the
    serving itself."""
    places = state.serving_places
    tier = state.tiers[job.tier]
    if places is None or tier.always_preempts or tier.long_running:
        return None
    idle, idled = state.idled(job, choice)
    refused = places.refusal(job, choice, end=state.end_if_admitted(job), idle=idle, idled=idled)
    if refused is None:
        return None
    reason, takes_in = refused
    state.note_decision_at(state.now + takes_in)
    return reason


def _grow(growable: tuple[PendingJob, ...], *, ranks: dict[str, int], state: CycleState) -> None:
    """Phase 5 (rule 13): once every queued job is decided, running elastic gangs below their
    maximum take whole replicas, in queue order, on devices none of those jobs could use: the
    same checks as an admission without eviction (`_free_place`: quota, what other tenants
    are owed, backfill holds), all added replicas placed at once. A gang takes the most
    replicas that fit, when that grow pays (`_grow_pays`: the re-forming costs the work since
    its checkpoint and a restart). Added replicas go on nodes that hold none of the gang's
    (`_grow_nodes`), as an admission puts each replica on its own node."""
    if not growable:
        return
    gangs = {gang.key: gang for gang in state.snapshot.running}
    moving = {gang.key for gang in state.snapshot.running if gang.is_evicting}
    if state.pool.partitioned:
        growable = tuple(state.pool.weighed(job) for job in growable)
    for job in ordering.in_queue_order(list(growable), ranks=ranks, shares=state.book):
        gang = gangs.get(job.key)
        if (
            gang is None
            or job.key in moving
            or job.key in state.claimed
            or gang.size >= job.replicas
        ):
            continue
        within = _grow_nodes(job, gang, state=state)
        if within is None:
            continue
        end = backfill.end_of(gang, tiers=state.tiers, now=state.now)
        rest = max(end - state.now, 0.0)
        for add in range(job.replicas - gang.size, 0, -1):
            part = elastic.addition(job, gang, add, rest_s=rest, now=state.now)
            choice = _free_place(part, state=state, within=within)
            if choice is None:
                continue
            if _grow_pays(gang, part, choice, rest_s=rest, state=state):
                result, borrowed = _take(part, choice, state=state)
                added = tuple(
                    dataclasses.replace(replica, replica=replica.replica + gang.size)
                    for replica in result
                )
                state.grows.append(Grow(job=job.key, placement=added, borrowed=borrowed))
            break


def _grow_nodes(
    job: PendingJob, gang: RunningJob, *, state: CycleState
) -> placement.NodeSubset | None:
    """The nodes a grow of `gang` may add replicas on: none of its own, and under a Required
    topology only those of the one domain its replicas run in (rule 7 holds for the grown
    gang as for the admitted one); None when its nodes carry no single domain."""
    own = frozenset(replica.node for replica in gang.placement)
    if job.topology.mode is not TopologyMode.REQUIRED:
        return placement.NodeSubset(own)
    key = job.topology.key
    known = state.snapshot.inventory.nodes
    domains = {known[node].labels.get(key) if node in known else None for node in own}
    domain = domains.pop() if len(domains) == 1 else None
    if domain is None:
        return None
    return placement.NodeSubset(own, state.domain_members(key).get(domain, frozenset()))


def _grow_pays(
    gang: RunningJob,
    part: PendingJob,
    choice: placement.Choice,
    *,
    rest_s: float,
    state: CycleState,
) -> bool:
    """Growing `gang` by `part` on `choice` pays by prediction (`elastic.grow_pays`) and, as
    ski rental, the devices it would add have idled since the gang started at its size
    (each since its release, as for a preemption) as long as the re-forming destroys
    (`elastic.grow_cost_device_s`): a prediction of a heavy-tailed run is no promise that the
    grow gains what it costs, but devices left idle that long have already wasted as much.
    Until then the cycle runs again when they will have."""
    long_running = state.tiers[gang.tier].long_running
    now = state.now
    if not elastic.grow_pays(
        gang, part.replicas, rest_s=rest_s, now=now, long_running=long_running
    ):
        return False
    idle, idled = state.idled(part, choice)
    cost = elastic.grow_cost_device_s(gang, part.device_count, now=now, long_running=long_running)
    if idled >= cost:
        return True
    state.note_decision_at(now + (cost - idled) / max(idle, 1))
    return False


def _full_start(job: PendingJob, *, state: CycleState) -> float | None:
    """When the job's full gang is predicted to fit without evictions, leaving alone what its
    backfill reservation would; None when that is unknown: it never fits, or its quota does
    not allow it now (reservations plan on devices, not on quota)."""
    shape = placement.Shape.of(job)
    if state.book.refusal(job) is not None or not state.is_possible(shape):
        return None
    mask = _holds_for(job, state=state)
    fence = _fence(job, may_reclaim=_may_reclaim(job, state=state), state=state)
    excluded, held_room = _fenced(mask, fence, device_class=job.device_class, state=state)
    return state.expected_start(shape, excluded=excluded, held_room=held_room)


def _decide_gang(job: PendingJob, *, state: CycleState) -> None:
    """Quota, placement, then why the gang is blocked (preemption, reservation, reason)."""
    refusal = state.book.refusal(job)
    if refusal is not None:
        state.pending[job.key] = refusal
        return
    shape = placement.Shape.of(job)
    may_reclaim = _may_reclaim(job, state=state)
    mask = _holds_for(job, state=state)
    fence = _fence(job, may_reclaim=may_reclaim, state=state)
    if fence is not None and _takes_owed(job, shape, mask, state=state):
        return
    eager = state.may_preempt(job)
    verdict_key = (shape, mask, job.tier, job.tenant if may_reclaim or fence else "", eager)
    verdict = state.verdicts.get(verdict_key)
    if verdict is not None:
        state.pending[job.key] = verdict
        return
    outcome = _place(shape, mask, fence, state=state)
    if isinstance(outcome, list):
        kept = _serving_refusal(job, outcome, state=state)
        if kept is not None:
            state.pending[job.key] = kept
        elif may_reclaim or not borrowing.risks_reclaim(job, state=state):
            _admit(job, outcome, state=state)
        return
    excluded, held_room = _fenced(mask, fence, device_class=job.device_class, state=state)
    if fence is not None and isinstance(_place(shape, mask, None, state=state), list):
        state.pending[job.key] = state.verdicts[verdict_key] = borrowing.owed_reason(
            job, state=state
        )
        return
    if mask and isinstance(_place(shape, (), fence, state=state), list):
        head = state.holds[mask[0]].reservation
        reason = explain.backfill(
            head=head.job, start_in_s=head.start_at - state.now, outlived=head.outlived
        )
        state.pending[job.key] = state.verdicts[verdict_key] = reason
        return
    if eager and preemptor.try_preempt(
        job, shape, state=state, may_reclaim=may_reclaim, excluded=excluded, held_room=held_room
    ):
        return
    weighed = state.pending.get(job.key)
    reason = weighed if weighed is not None else _capacity_reason(job, outcome)
    start = None
    if state.policy.backfill and job.tier not in state.reserved_tiers:
        start = _reserve(job, shape, state=state, excluded=excluded, held_room=held_room)
    if start is None:
        if weighed is None:
            state.verdicts[verdict_key] = reason
    else:
        reason = explain.with_reserved_start(
            reason, start_in_s=start.start_at - state.now, outlived=start.outlived
        )
    state.pending[job.key] = reason


def _fenced(
    mask: Mask, fence: Tenant | None, *, device_class: str, state: CycleState
) -> tuple[frozenset[DeviceId], dict[NodeName, Room]]:
    """What a job must leave alone: the backfill holds in `mask` and, for a borrower of tenant
    `fence`, the holds of jobs other tenants are owed (module `owed`)."""
    merged = _merged(mask, state=state)
    if fence is None:
        return merged
    cache_key = (mask, fence, device_class)
    found = state.fenced.get(cache_key)
    if found is None:
        owed_devices, owed_room = state.owed.held_for_others(fence, device_class, pool=state.pool)
        room = dict(merged[1])
        for node, (cpu, memory, pods) in owed_room.items():
            current = room.get(node, (0, 0, 0))
            room[node] = (current[0] + cpu, current[1] + memory, current[2] + pods)
        found = state.fenced[cache_key] = (merged[0] | owed_devices, room)
    return found


def _takes_owed(job: PendingJob, shape: placement.Shape, mask: Mask, *, state: CycleState) -> bool:
    """A borrowing job that would leave fewer free devices than other tenants are owed waits
    (module `owed`); it may still evict borrowers if that frees enough. True when decided.
    Such a job gets no backfill reservation: it would hold the owed devices against the very
    jobs they are owed to. A refusal is remembered for jobs alike while owed and free stay."""
    if borrowing.leaves_owed(job, state=state):
        return False
    owed = state.owed.to_others(job.tenant, job.device_class)
    free = state.pool.free_count(job.device_class)
    eager = state.may_preempt(job)
    memo_key = (shape, mask, job.tier, job.tenant, owed, free, eager)
    known = state.owed_verdicts.get(memo_key)
    if known is not None:
        state.pending[job.key] = known
        return True
    excluded, held_room = _fenced(mask, job.tenant, device_class=job.device_class, state=state)
    if eager and preemptor.try_preempt(
        job, shape, state=state, may_reclaim=False, excluded=excluded, held_room=held_room
    ):
        if state.pending[job.key].code is explain.ReasonCode.QUOTA:
            state.owed_verdicts[memo_key] = state.pending[job.key]
        return True
    reason = borrowing.owed_reason(job, state=state)
    state.pending[job.key] = state.owed_verdicts[memo_key] = reason
    return True


def _place(
    shape: placement.Shape,
    mask: Mask,
    fence: Tenant | None,
    *,
    state: CycleState,
    within: placement.NodeSubset | None = None,
) -> Outcome:
    """Placement with a memo of failures: capacity only shrinks during a cycle."""
    memo_key = (shape, mask, fence, within)
    known = state.placements.get(memo_key)
    if known is not None:
        return known
    excluded, held_room = _fenced(mask, fence, device_class=shape.selector[0], state=state)
    outcome = placement.place(
        shape, state.pool, excluded=excluded, held_room=held_room, within=within
    )
    if isinstance(outcome, placement.Shortfall):
        state.placements[memo_key] = outcome
    return outcome


def _take(
    job: PendingJob, choice: placement.Choice, *, state: CycleState
) -> tuple[tuple[ReplicaPlacement, ...], int]:
    """The job's replicas on `choice`, taken from the pool and charged to its tenant; and
    how many devices of them are borrowed: whole devices above nominal, a started one
    counting whole (what `jobs.borrowed` holds)."""
    pool = state.pool
    result = placement.as_placement(choice, placement.Shape.of(job), pool)
    held = pool.held_equivalent(result) if pool.partitioned else job.equivalent_milli
    borrowed = int(-(-state.book.borrowed(job.tenant, job.device_class, held) // sharing.WHOLE))
    state.book.charge(job.tenant, job.device_class, held)
    for replica in result:
        pool.take(replica.node, replica.devices, job.pod, shares=replica.shares)
        state.touched_nodes.add(replica.node)
    if state.serving_places is not None:
        state.serving_places.take(job, choice, end=state.end_if_admitted(job))
    return result, borrowed


def _admit(job: PendingJob, choice: placement.Choice, *, state: CycleState) -> None:
    result, borrowed = _take(job, choice, state=state)
    state.owed.settle(job)
    state.admissions.append(Admission(job=job.key, placement=result, borrowed=borrowed))
    end = state.end_if_admitted(job)
    if end == math.inf:
        return
    gang = RunningJob(
        key=job.key,
        uid=job.uid,
        tenant=job.tenant,
        tier=job.tier,
        priority=job.priority,
        device_class=job.device_class,
        placement=result,
        started_at=state.now,
        max_runtime_s=job.max_runtime_s,
        borrowed=borrowed,
        pod=job.pod,
        submitted_at=job.submitted_at,
        predicted_end_at=end,
    )
    bisect.insort(state.admitted_releases, (end, gang), key=backfill.release_order)


def _capacity_reason(job: PendingJob, outcome: Outcome) -> explain.PendingReason:
    assert isinstance(outcome, placement.Shortfall)
    required = job.topology.mode is TopologyMode.REQUIRED
    return explain.capacity(
        replicas=job.replicas,
        devices_per_replica=job.devices_per_replica,
        device_class=job.device_class,
        constraints=job.constraints,
        domain_key=job.topology.key if required else None,
        usable=outcome.with_room,
        best_domain=outcome.best_domain,
        lacking_room=0 if required else outcome.with_devices - outcome.with_room,
    )


def _reserve(
    job: PendingJob,
    shape: placement.Shape,
    *,
    state: CycleState,
    excluded: frozenset[DeviceId],
    held_room: dict[NodeName, backfill.Room],
) -> BackfillReservation | None:
    """Phase 2d: the first blocked job of a tier gets its earliest start on concrete nodes."""
    if shape in state.unreservable:
        return None
    required = shape.topology.mode is TopologyMode.REQUIRED
    if required and shape.replicas > 1 and not state.is_possible(shape):
        # a gang no single domain can ever hold would sweep every release in vain
        state.unreservable.add(shape)
        return None
    found = backfill.earliest_start(
        shape,
        pool=state.pool,
        releases=state.releases(),
        now=state.now,
        excluded=excluded,
        held_room=held_room,
    )
    if found is None:
        state.unreservable.add(shape)
        return None
    reservation = BackfillReservation(
        job=job.key,
        tier=job.tier,
        start_at=found.at,
        nodes=tuple(node for node, _ in found.choice),
        outlived=found.outlived,
    )
    state.holds.append(backfill.hold(reservation, found.choice, pool=state.pool, shape=shape))
    state.reserved_tiers.add(job.tier)
    return reservation
