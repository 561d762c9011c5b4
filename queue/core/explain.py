"""Pending reasons: why a job waits, in words and numbers a person can act on (rule 10).

Owns the `PendingReason` type, its codes and one builder per kind of reason; the exact texts are
part of the product (tests pin them). It must not decide anything: callers pass the numbers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ReasonCode(enum.StrEnum):
    """Machine-readable kind of a pending reason, also the prefix of its message."""

    QUOTA = "quota"
    CAPACITY = "capacity"
    BACKFILL = "backfill"
    PREEMPTION = "preemption"
    INVALID = "invalid"
    """The spec must change: the job ended Failed and holds no place in the queue."""
    UNSCHEDULABLE = "unschedulable"
    """The cluster as configured can never run the job: it stays visible, out of line, and is
    judged again every cycle (inventory, quotas or tiers may change)."""
    CONTROLLER = "controller"
    """The API server refused a write of gangq's own (a missing permission, a field gangq
    sets): the job stays queued, never blamed (rule 14), and is tried again after a pause."""


WAITING_CODES = frozenset(
    {ReasonCode.QUOTA, ReasonCode.CAPACITY, ReasonCode.BACKFILL, ReasonCode.PREEMPTION}
)
"""Reasons of jobs that wait for something that will come free: only those hold a position."""


class WaitCause(enum.StrEnum):
    """What a waiting job waits for, finer than its code: the simulator sums waits by cause
    so a quota admin sees which rule a week's waits come from."""

    LIMIT = "limit"
    """The tenant's own quota (nominal + borrowing limit, or a tier it may not use)."""
    OWED = "owed"
    """A borrower leaves the free devices to tenants waiting within nominal."""
    UNSAVED = "unsaved"
    """A long borrower without checkpoints leaves the devices other tenants could reclaim."""
    SERVING = "serving"
    """A job that would run past a forecast serving scale-up keeps its place cheap to clear."""
    CAPACITY = "capacity"
    BACKFILL = "backfill"
    """Devices are free, but held for the reservation of a job ahead."""
    EVICTING = "evicting"
    """Victims are leaving; the job is admitted when they are gone."""
    NOT_PAYING = "not-paying"
    """An eviction by tier would destroy more work than waiting has cost."""
    RECLAIM_PATIENCE = "reclaim-patience"
    """A reclaim waits until its tenant's wait has cost as much as evicting borrowers would."""
    INVALID = "invalid"
    UNSCHEDULABLE = "unschedulable"


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is still pending; `message` starts with `code` and a colon."""

    code: ReasonCode
    message: str
    cause: WaitCause | None = field(default=None, compare=False)
    """Set by the core; a reason read back from the store keeps only code and message, so two
    reasons are the same when those are."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def approximately(seconds: float) -> str:
    """A short duration for people: ~45s, ~12m, ~3h05m."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"~{whole}s"
    if whole < 3600:
        return f"~{round(whole / 60)}m"
    hours, rest = divmod(whole, 3600)
    return f"~{hours}h{rest // 60:02d}m"


def _first(names: tuple[str, ...], count: int) -> str:
    """The first `count` names, and how many more there are."""
    more = f" and {len(names) - count} more" if len(names) > count else ""
    return ", ".join(names[:count]) + more


def _short(name: str) -> str:
    """`gangq.dev/rack` reads as `rack`, `gpu.nvidia.com/numa` as `numa`."""
    return name.rpartition("/")[2] or name


def invalid(problem: str) -> PendingReason:
    return PendingReason(ReasonCode.INVALID, f"invalid: {problem}", WaitCause.INVALID)


def controller(problem: str) -> PendingReason:
    """`problem` names what an administrator must fix in gangq or its access to the cluster."""
    return PendingReason(ReasonCode.CONTROLLER, f"controller: {problem}")


def unschedulable(problem: str) -> PendingReason:
    """`problem` says what would have to change for the job to ever run."""
    return PendingReason(
        ReasonCode.UNSCHEDULABLE, f"unschedulable: {problem}", WaitCause.UNSCHEDULABLE
    )


def tier_not_allowed(*, tenant: str, tier: str, allowed: tuple[str, ...]) -> PendingReason:
    return PendingReason(
        ReasonCode.QUOTA,
        f"quota: tenant {tenant} may not use tier {tier} (allowed: {', '.join(allowed)})",
        WaitCause.LIMIT,
    )


def quota_exceeded(
    *, tenant: str, used: str, nominal: int, borrowing_limit: int, needed: str, device_class: str
) -> PendingReason:
    """`used` and `needed` are GPU-equivalents as `sharing.format_equivalent` writes them."""
    return PendingReason(
        ReasonCode.QUOTA,
        f"quota: tenant {tenant} uses {used}/{nominal} nominal, borrowing limit "
        f"{borrowing_limit}, job needs {needed} {device_class}",
        WaitCause.LIMIT,
    )


def owed(*, tenant: str, needed: int, free: int, owed: int, device_class: str) -> PendingReason:
    """A borrower may not take devices that tenants under their nominal quota wait for."""
    return PendingReason(
        ReasonCode.QUOTA,
        f"quota: tenant {tenant} would borrow, but {owed} of the {free} free {device_class} are "
        f"owed to tenants waiting within nominal, job needs {needed}",
        WaitCause.OWED,
    )


def unsaved_borrow(
    *, tenant: str, run_s: float | None, needed: int, free: int, left: int, device_class: str
) -> PendingReason:
    """A borrower that saves no checkpoint leaves free part of the others' unused nominal
    quota, more the longer it runs (`left` of the `free` devices)."""
    run = "an unbounded run" if run_s is None else f"a run of {approximately(run_s)}"
    return PendingReason(
        ReasonCode.QUOTA,
        f"quota: tenant {tenant} would borrow for {run} without checkpoints, which leaves "
        f"{left} of the {free} free {device_class} to tenants under nominal who may reclaim "
        f"them; job needs {needed}",
        WaitCause.UNSAVED,
    )


def serving_place(
    *,
    tenant: str,
    replicas: int,
    devices_per_replica: int,
    rise_in_s: float | None,
    days: int,
    takes_in_s: float,
) -> PendingReason:
    """The job would run past a scale-up of a tier that always preempts, without checkpoints,
    on the last place that scale-up could clear cheaply (module `serving`); it takes the place
    once its idle devices have cost what that scale-up would destroy. `rise_in_s` None: a
    scale-up not yet seen to recur, which may come at any time."""
    if rise_in_s is None:
        expected = (
            f"tenant {tenant}'s scale-up within its nominal quota ({replicas} x "
            f"{devices_per_replica}, not yet seen to recur, so it may come at any time)"
        )
    else:
        expected = (
            f"tenant {tenant}'s daily scale-up ({replicas} x {devices_per_replica}, expected in "
            f"{approximately(rise_in_s)}, seen on {days} of the last days)"
        )
    return PendingReason(
        ReasonCode.CAPACITY,
        f"capacity: keeps a place cheap to clear for {expected}: the job would run past it "
        f"without checkpoints; it takes the place in {approximately(takes_in_s)} at the latest, "
        "when its idle devices will have cost what the scale-up would destroy",
        WaitCause.SERVING,
    )


def capacity(
    *,
    replicas: int,
    devices_per_replica: int,
    device_class: str,
    constraints: tuple[str, ...],
    domain_key: str | None,
    usable: int,
    best_domain: int | None,
    lacking_room: int,
) -> PendingReason:
    """`domain_key` is set for Required topology, where `best_domain` counts usable nodes."""
    need = f"needs {_plural(replicas, 'node')} with {devices_per_replica} free {device_class}"
    if constraints:
        need += " sharing " + ", ".join(_short(name) for name in constraints)
    if domain_key is not None:
        domain = _short(domain_key)
        message = f"capacity: {need} in one {domain}, best {domain} has {best_domain or 0}"
    else:
        message = f"capacity: {need}, {usable} {'has' if usable == 1 else 'have'} them"
    if lacking_room:
        message += f" ({lacking_room} more lack cpu, memory or pod room)"
    return PendingReason(ReasonCode.CAPACITY, message, WaitCause.CAPACITY)


def _outlived_note(outlived: tuple[str, ...]) -> str:
    """Why a reservation moved later (rule 5): the gangs it waits on ran past their prediction;
    otherwise only a higher-ordered job can have moved it."""
    if not outlived:
        return ""
    shown = _first(outlived, 2)
    verb = "outlived its prediction" if len(outlived) == 1 else "outlived their predictions"
    return f" (later than planned: {shown} {verb})"


def with_reserved_start(
    reason: PendingReason, *, start_in_s: float, outlived: tuple[str, ...] = ()
) -> PendingReason:
    """The head job of a tier keeps its capacity reason and learns when it will start."""
    return PendingReason(
        reason.code,
        f"{reason.message}; reserved start in {approximately(start_in_s)}"
        + _outlived_note(outlived),
        reason.cause,
    )


def waits_for_all_replicas(
    reason: PendingReason,
    *,
    replicas: int,
    size: int,
    full_end_in_s: float,
    small_end_in_s: float,
) -> PendingReason:
    """An elastic job that could start smaller now keeps the reason it waits for its full
    size, and learns why it does not start smaller: all replicas are predicted to end first
    (rule 13)."""
    return PendingReason(
        reason.code,
        f"{reason.message}; all {replicas} replicas are predicted to end in "
        f"{approximately(full_end_in_s)}, sooner than {size} started now "
        f"({approximately(small_end_in_s)})",
        reason.cause,
    )


def backfill(*, head: str, start_in_s: float, outlived: tuple[str, ...] = ()) -> PendingReason:
    return PendingReason(
        ReasonCode.BACKFILL,
        f"backfill: waiting behind {head}, reserved start in {approximately(start_in_s)}"
        + _outlived_note(outlived),
        WaitCause.BACKFILL,
    )


def _device_hours(value: float) -> str:
    return f"{value:.1f} device-h"


def preemption(*, victims: tuple[str, ...], cost_device_h: float = 0.0) -> PendingReason:
    shown = _first(victims, 3)
    cost = f", costs {_device_hours(cost_device_h)}" if cost_device_h > 0 else ""
    return PendingReason(
        ReasonCode.PREEMPTION,
        f"preemption: waiting for {_plural(len(victims), 'gang')} to be evicted ({shown}){cost}",
        WaitCause.EVICTING,
    )


def _pays_when(evict_in_s: float | None) -> str:
    """When an eviction that waits (ski rental, rule 6) may first pay."""
    if evict_in_s is None:
        return "never pays while their unsaved work grows as fast"
    return f"pays in {approximately(evict_in_s)} at the earliest"


def _more_than_waiting(victims: tuple[str, ...], cost_device_h: float) -> str:
    """The start both not-paying reasons of a preemption by tier share."""
    return (
        f"preemption: evicting {_first(victims, 2)} costs {_device_hours(cost_device_h)}, "
        "more than waiting"
    )


def preemption_does_not_pay(
    *,
    victims: tuple[str, ...],
    cost_device_h: float,
    idle: int,
    idled_device_h: float,
    evict_in_s: float | None,
    free_in_s: float | None,
) -> PendingReason:
    """Evicting by tier would cost more device-time (lost work, restarts, work lost before)
    than the free devices of the job's place have stood idle while it waited (rule 6);
    `evict_in_s` is the earliest that can change, None: never while the victims' unsaved work
    grows at least as fast."""
    idled = (
        "no free device of its place idles meanwhile"
        if idle == 0
        else f"the {_plural(idle, 'free device')} of its place idled "
        f"{_device_hours(idled_device_h)} meanwhile"
    )
    pays = _pays_when(evict_in_s)
    free = (
        "no devices predicted to free"
        if free_in_s is None
        else f"devices free in {approximately(free_in_s)} by prediction"
    )
    return PendingReason(
        ReasonCode.PREEMPTION,
        f"{_more_than_waiting(victims, cost_device_h)}: {idled}; evicting {pays} ({free})",
        WaitCause.NOT_PAYING,
    )


def waiting_is_cheaper(
    *,
    victims: tuple[str, ...],
    cost_device_h: float,
    idle: int,
    idle_device_h: float,
    free_in_s: float,
) -> PendingReason:
    """Evicting by tier would have paid for the idle time already spent, but the devices are
    predicted to free before the idle ones cost as much again (rule 6)."""
    return PendingReason(
        ReasonCode.PREEMPTION,
        f"{_more_than_waiting(victims, cost_device_h)}: devices free in "
        f"{approximately(free_in_s)} by prediction, while the "
        f"{_plural(idle, 'free device')} of its place {'idles' if idle == 1 else 'idle'} "
        f"{_device_hours(idle_device_h)}",
        WaitCause.NOT_PAYING,
    )


def reclaim_patience(
    *,
    tenant: str,
    kept_device_h: float,
    cost_device_h: float,
    evict_in_s: float | None,
    free_in_s: float | None,
) -> PendingReason:
    """A reclaim of nominal quota waits until its job has kept its tenant from its nominal
    quota as much device-time as evicting the borrowers costs (rule 6); `evict_in_s` is the
    earliest that can be (their checkpoints lower the cost), None: their cost grows as fast
    as the wait."""
    pays = _pays_when(evict_in_s)
    free = (
        "no borrowed devices predicted to free"
        if free_in_s is None
        else f"borrowed devices free in {approximately(free_in_s)} by prediction"
    )
    return PendingReason(
        ReasonCode.PREEMPTION,
        f"preemption: reclaim waits: evicting borrowers costs {_device_hours(cost_device_h)}, "
        f"its wait kept tenant {tenant} {_device_hours(kept_device_h)} from its nominal quota; "
        f"evicting {pays} ({free})",
        WaitCause.RECLAIM_PATIENCE,
    )


def preempted_by(
    *, preemptor: str, preemptor_tier: str, victim_tier: str, lost_device_h: float
) -> str:
    """The reason a victim is given when a higher tier needs its devices."""
    return (
        f"preempted by {preemptor} (tier {preemptor_tier} > {victim_tier}), "
        f"losing {_device_hours(lost_device_h)} since the last checkpoint"
    )


def shrunk(reason: str, *, keep: int, size: int) -> str:
    """The reason an elastic victim that gives back replicas instead of going is given."""
    return f"shrinking from {size} to {keep} replicas: {reason}"


def reclaimed(*, victim_tenant: str, preemptor: str, lost_device_h: float) -> str:
    """The reason a borrowing victim is given when another tenant takes its nominal back."""
    return (
        f"reclaim: tenant {victim_tenant} back under nominal for {preemptor}, "
        f"losing {_device_hours(lost_device_h)} since the last checkpoint"
    )
