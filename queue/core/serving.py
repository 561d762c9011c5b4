"""Recurring serving demand: when a tier that always preempts (prod inference) is expected to
scale up next, learned from when it did on earlier days, and the place kept cheap to clear for
that scale-up.

Why: a scale-up evicts at once, without the pays test (rule 6), so it destroys whatever runs
on the cheapest place it can clear. On a busy cluster every place holds hours of unsaved work
by then, and each daily scale-up destroyed a node's worth. Serving traffic follows the time of
day, so its scale-ups recur at about the same hour: from the admissions of the last
`Policy.serving_forecast_days` days, this module expects the next one at the earliest hour of
day they came at, and the cycle then keeps one place for it where everything is predicted to
end by then or saves checkpoints. A job expected to run past that instant without
checkpoints is not placed where it would leave no such place; it waits, or runs elsewhere.

Before a scale-up has come on enough days to recur, its hour is unknown but the risk is not:
a tenant serving now, with room in its nominal quota, may scale up at any time, and every
device in that room holds work it may destroy. So until the forecast knows better, one such
place is kept as well, for a scale-up that may come at once (`unforeseen`). A tenant that
serves nothing now has no service to scale: its devices go to whoever waits.

Owns the forecast and that check; the cycle acts on the answers, nothing here admits.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gangq.queue.core import backfill, explain, placement
from gangq.queue.core.model import NodeName, PendingJob, RunningJob, ServingStart, Tenant, Tier
from gangq.queue.core.pool import Pool
from gangq.queue.core.quota import QuotaBook

DAY_S = 86_400.0
GAP_S = 3 * 3_600.0
"""Starts more than this apart in the hour of day belong to different daily rises."""
MIN_DAYS = 2
"""A rise recurs once it came on this many different days of the window."""
UNFORESEEN_CHEAP_S = 3_600.0
"""A scale-up not yet seen to recur may come at any time: what ends within this is cheap to
clear for it."""
UNFORESEEN_EXPOSURE_S = DAY_S
"""What such a scale-up would destroy of a job is counted up to this much of its run: a daily
one comes within a day."""


@dataclass(frozen=True, slots=True)
class Rise:
    """A scale-up expected at `at` (the earliest hour of day it came at; `at` is now when that
    hour has passed today without it), of the largest shape it came with. `days` 0: one not
    seen to recur (`unforeseen`), `at` only bounding what is cheap to clear for it."""

    tenant: Tenant
    device_class: str
    replicas: int
    devices_per_replica: int
    at: float
    days: int
    """Days of the window it came on."""


def rises(starts: Iterable[ServingStart], *, now: float, days: int) -> tuple[Rise, ...]:
    """The next expected rise of each recurring scale-up, per tenant and device class.

    Starts of the last `days` days are grouped by hour of day (a gap over `GAP_S` splits them;
    a group that straddles midnight counts as two); a group recurs when it holds starts of
    `MIN_DAYS` different days. Its next rise is today at its earliest hour unless one of its
    starts came today or its latest hour has passed, else tomorrow at that hour."""
    since = now - days * DAY_S
    by_owner: dict[tuple[Tenant, str], list[ServingStart]] = {}
    for start in starts:
        if since <= start.at <= now:
            by_owner.setdefault((start.tenant, start.device_class), []).append(start)
    found = []
    today = math.floor(now / DAY_S)
    for (tenant, device_class), owned in sorted(by_owner.items()):
        owned.sort(key=lambda start: start.at % DAY_S)
        groups: list[list[ServingStart]] = [[owned[0]]]
        for start in owned[1:]:
            if start.at % DAY_S - groups[-1][-1].at % DAY_S > GAP_S:
                groups.append([])
            groups[-1].append(start)
        for group in groups:
            seen_days = {math.floor(start.at / DAY_S) for start in group}
            if len(seen_days) < MIN_DAYS:
                continue
            first, last = group[0].at % DAY_S, group[-1].at % DAY_S
            due_today = today not in seen_days and now - today * DAY_S <= last
            at = max(today * DAY_S + first, now) if due_today else (today + 1) * DAY_S + first
            replicas, per_replica = max(
                (start.replicas, start.devices_per_replica) for start in group
            )
            found.append(Rise(tenant, device_class, replicas, per_replica, at, len(seen_days)))
    return tuple(found)


def unforeseen(
    starts: Iterable[ServingStart],
    foreseen: Sequence[Rise],
    *,
    serving: Collection[tuple[Tenant, str]],
    book: QuotaBook,
    now: float,
    days: int,
) -> tuple[Rise, ...]:
    """Per tenant and device class in `serving` (it runs a gang of a tier that always
    preempts) that was admitted within the last `days` days but has no rise in `foreseen`: a
    scale-up that may come at once, of as many replicas of the largest size it started with as
    the room left in its nominal quota holds."""
    since = now - days * DAY_S
    widest: dict[tuple[Tenant, str], int] = {}
    for start in starts:
        if since <= start.at <= now:
            owner = (start.tenant, start.device_class)
            widest[owner] = max(widest.get(owner, 0), start.devices_per_replica)
    planned = {(rise.tenant, rise.device_class) for rise in foreseen}
    found = []
    for (tenant, device_class), per_replica in sorted(widest.items()):
        if (tenant, device_class) in planned or (tenant, device_class) not in serving:
            continue
        room = book.quota(tenant, device_class).nominal - book.in_use(tenant, device_class)
        replicas = int(room // per_replica)
        if replicas > 0:
            found.append(
                Rise(tenant, device_class, replicas, per_replica, now + UNFORESEEN_CHEAP_S, 0)
            )
    return tuple(found)


def is_cheap(gang: RunningJob, *, by: float, tiers: Mapping[str, Tier], now: float) -> bool:
    """Evicting the gang at `by` would destroy little: it is predicted to have ended by then,
    or it saves checkpoints. A gang being evicted is not: its devices are spoken for by
    whoever evicts it."""
    if gang.is_evicting:
        return False
    if gang.checkpoint_interval_s is not None:
        return True
    return backfill.end_of(gang, tiers=tiers, now=now) <= by


class Places:
    """Per rise, how many devices of each node would be cheap to clear at its hour: free ones
    and those of cheap gangs (`is_cheap`). Built before the cycle admits anything, and updated
    as it admits jobs that will still run then."""

    def __init__(
        self,
        found: Sequence[Rise],
        *,
        pool: Pool,
        running: Sequence[RunningJob],
        tiers: Mapping[str, Tier],
        now: float,
    ) -> None:
        self._now = now
        self._rises = list(found)
        self._cheap: list[dict[NodeName, int]] = []
        for rise in self._rises:
            free = pool.view((rise.device_class, (), ())).by_node
            cheap = {node: len(devices) for node, devices in free.items()}
            for gang in running:
                if gang.device_class == rise.device_class and is_cheap(
                    gang, by=rise.at, tiers=tiers, now=now
                ):
                    for part in gang.placement:
                        cheap[part.node] = cheap.get(part.node, 0) + len(part.devices)
            self._cheap.append(cheap)

    def refusal(
        self, job: PendingJob, choice: placement.Choice, *, end: float, idle: int, idled: float
    ) -> tuple[explain.PendingReason, float] | None:
        """Why the job may not take `choice`, and in how long it may: it would run past a
        rise without checkpoints and leave it no place to clear cheaply, where there was one.
        None: it may.

        Keeping the place is ski rental, as an eviction by tier is (rule 6): the job takes it
        once the `idle` free devices of its place have idled, while it waited (`idled`
        device-seconds), as much as the scale-up would destroy by evicting it: its devices
        from now to the rise, and their restart. A job never waits out more than that. For a
        rise that may come at any time, the worst is its whole run, counted up to
        `UNFORESEEN_EXPOSURE_S`."""
        if job.checkpoint_interval_s is not None:
            return None
        now = self._now
        for rise, cheap in zip(self._rises, self._cheap, strict=True):
            if rise.device_class != job.device_class or end <= rise.at:
                continue
            left = dict(cheap)
            for node, devices in choice:
                left[node] = left.get(node, 0) - len(devices)
            if not _places(left, rise) < rise.replicas <= _places(cheap, rise):
                continue
            taking = sum(len(taken) for _, taken in choice)
            if rise.days:
                exposed = max(rise.at - now, 0.0)
            else:
                exposed = min(end - now, UNFORESEEN_EXPOSURE_S)
            lost = taking * (exposed + job.restart_s)
            if idled >= lost:
                continue
            takes_in = (lost - idled) / (idle + taking)
            reason = explain.serving_place(
                tenant=rise.tenant,
                replicas=rise.replicas,
                devices_per_replica=rise.devices_per_replica,
                rise_in_s=rise.at - now if rise.days else None,
                days=rise.days,
                takes_in_s=takes_in,
            )
            return reason, takes_in
        return None

    def take(self, job: PendingJob, choice: placement.Choice, *, end: float) -> None:
        """The job was admitted: the devices it takes stop being cheap at the rises it runs
        past without checkpoints."""
        if job.checkpoint_interval_s is not None:
            return
        for rise, cheap in zip(self._rises, self._cheap, strict=True):
            if rise.device_class == job.device_class and end > rise.at:
                for node, devices in choice:
                    cheap[node] = cheap.get(node, 0) - len(devices)


def places(
    starts: Sequence[ServingStart],
    *,
    days: int | None,
    pool: Pool,
    running: Sequence[RunningJob],
    book: QuotaBook,
    tiers: Mapping[str, Tier],
    now: float,
) -> Places | None:
    """The cycle's places kept for forecast rises and for those not yet seen to recur; None
    when no rise is expected that its tenant's nominal quota has room for (or the forecast is
    off)."""
    if not days or not starts:
        return None
    foreseen = rises(starts, now=now, days=days)
    found = [rise for rise in foreseen if _has_room(rise, book)]
    serving = {
        (gang.tenant, gang.device_class)
        for gang in running
        if gang.tier in tiers and tiers[gang.tier].always_preempts
    }
    found += unforeseen(starts, foreseen, serving=serving, book=book, now=now, days=days)
    if not found:
        return None
    return Places(found, pool=pool, running=running, tiers=tiers, now=now)


def _places(cheap: Mapping[NodeName, int], rise: Rise) -> int:
    return sum(1 for count in cheap.values() if count >= rise.devices_per_replica)


def _has_room(rise: Rise, book: QuotaBook) -> bool:
    """The scale-up would fit its tenant's nominal quota: one beyond it is not planned for."""
    quota = book.quota(rise.tenant, rise.device_class)
    wanted = rise.replicas * rise.devices_per_replica
    return book.in_use(rise.tenant, rise.device_class) + wanted <= quota.nominal
