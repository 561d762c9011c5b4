"""Recurring serving demand (module `serving`): the daily scale-up forecast from earlier
admissions, and the place a job that would run past it without checkpoints must leave cheap
to clear."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import builders

from gangq.queue.core import cycle, serving
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.explain import WaitCause
from gangq.queue.core.model import (
    CycleResult,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    ServingStart,
    Snapshot,
    Tenant,
    TenantQuota,
)
from gangq.queue.core.quota import QuotaBook

DAY = 86_400.0
HOUR = 3_600.0
NOW = 10 * DAY + 9 * HOUR
"""Day 10 at 09:00."""
GPU = builders.GPU


def _start(day: int, hour: float, *, tenant: str = "prod") -> ServingStart:
    return ServingStart(Tenant(tenant), GPU, 1, 8, day * DAY + hour * HOUR)


DAILY = (_start(7, 11.0), _start(8, 12.0), _start(9, 13.5))
"""A 1 x 8 scale-up on days 7 to 9 between 11:00 and 13:30."""


def test_a_daily_scale_up_is_expected_at_the_earliest_hour_it_came_at() -> None:
    (rise,) = serving.rises(DAILY, now=NOW, days=7)
    assert (rise.tenant, rise.replicas, rise.devices_per_replica) == ("prod", 1, 8)
    assert rise.at == 10 * DAY + 11 * HOUR
    assert rise.days == 3


def test_once_it_came_today_the_next_is_tomorrow() -> None:
    (rise,) = serving.rises((*DAILY, _start(10, 8.5)), now=NOW, days=7)
    assert rise.at == 11 * DAY + 8.5 * HOUR


def test_within_its_hours_and_not_yet_come_it_is_due_now() -> None:
    (rise,) = serving.rises(DAILY, now=10 * DAY + 12 * HOUR, days=7)
    assert rise.at == 10 * DAY + 12 * HOUR


def test_past_its_latest_hour_without_it_the_next_is_tomorrow() -> None:
    (rise,) = serving.rises(DAILY, now=10 * DAY + 15 * HOUR, days=7)
    assert rise.at == 11 * DAY + 11 * HOUR


def test_one_day_is_no_recurrence_and_old_days_are_forgotten() -> None:
    assert serving.rises((_start(9, 11.0), _start(9, 12.0)), now=NOW, days=7) == ()
    assert serving.rises(DAILY, now=NOW + DAY, days=2) == ()  # only day 9 is in the window


def test_hours_far_apart_are_separate_rises() -> None:
    evening = (_start(8, 20.0), _start(9, 21.0))
    found = serving.rises((*DAILY, *evening), now=NOW, days=7)
    assert sorted(rise.at for rise in found) == [10 * DAY + 11 * HOUR, 10 * DAY + 20 * HOUR]


# --- the cycle keeps a place cheap to clear ----------------------------------------------------

QUOTAS = (builders.quota("prod", 8), builders.quota("team-a", 8, borrowing_limit=8))
COSTLY = dataclasses.replace(
    builders.gang("costly", [("node-0", range(8))], started_at=NOW - 5 * HOUR),
    max_runtime_s=100 * HOUR,
)
"""Node 0 holds a gang that runs for days without checkpoints: node 1 is the last place the
scale-up could clear cheaply."""


DEFAULT = Policy()


def _cycle(
    job: PendingJob,
    *,
    running: tuple[RunningJob, ...] = (COSTLY,),
    starts: tuple[ServingStart, ...] = DAILY,
    policy: Policy = DEFAULT,
    now: float = NOW,
    free_since: Mapping[DeviceId, float] | None = None,
    nodes: int = 2,
    quotas: tuple[TenantQuota, ...] = QUOTAS,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes),
        quotas=quotas,
        running=running,
        pending=(job,),
        serving_starts=starts,
        free_since=free_since or {},
    )
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=now, matcher=DeviceMatcher())


def _serving_refusal(result: CycleResult) -> str:
    """The message of the long job's wait, which must be for a serving place."""
    assert result.admissions == ()
    reason = result.pending[JobKey("team-a/long")]
    assert reason.cause is WaitCause.SERVING
    return reason.message


def _long(**changes: object) -> PendingJob:
    job = builders.job("long", per_replica=8, submitted_at=NOW, max_runtime_s=20 * HOUR)
    return dataclasses.replace(job, **changes)


def test_a_job_that_would_run_past_the_scale_up_leaves_the_last_cheap_place() -> None:
    """Evicted at the rise, 2 h from now, it would lose 8 x (2 h + its 300 s restart) =
    60,000 device-s. Its 8 idle devices and that loss meet in 60,000 / 16 = 3,750 s: then
    waiting has cost what taking the place would, and the cycle asks to be run again."""
    result = _cycle(_long())
    assert _serving_refusal(result) == (
        "capacity: keeps a place cheap to clear for tenant prod's daily scale-up (1 x 8, "
        "expected in ~2h00m, seen on 3 of the last days): the job would run past it without "
        "checkpoints; it takes the place in ~1h02m at the latest, when its idle devices will "
        "have cost what the scale-up would destroy"
    )
    assert result.decide_again_at == NOW + 3_750.0


def test_a_job_takes_the_place_once_its_idle_devices_cost_what_the_scale_up_would_destroy() -> None:
    """Queued 1 h ago on a place free since: its 8 devices idled 8 device-h, more than an
    eviction 1 h from now would destroy, 8 x (1 h + 300 s). Had the place come free just
    now, nothing would have idled yet."""
    late = _long(submitted_at=NOW - HOUR)
    assert [a.job for a in _cycle(late, now=NOW + HOUR).admissions] == ["team-a/long"]
    freed_now = {builders.device_id("node-1", index): NOW + HOUR for index in range(8)}
    assert _cycle(late, now=NOW + HOUR, free_since=freed_now).admissions == ()


def test_a_job_that_ends_before_it_or_saves_checkpoints_takes_the_place() -> None:
    ends_first = _cycle(_long(predicted_runtime_s=1.5 * HOUR))
    saves = _cycle(_long(checkpoint_interval_s=1_800.0))
    assert [a.job for a in ends_first.admissions] == ["team-a/long"]
    assert [a.job for a in saves.admissions] == ["team-a/long"]


def test_without_the_forecast_or_any_scale_up_it_takes_the_place() -> None:
    off = _cycle(_long(), policy=Policy(serving_forecast_days=None))
    never = _cycle(_long(), starts=())
    long_ago = _cycle(_long(), starts=(_start(1, 11.0),))  # before the window of 7 days
    assert [a.job for a in off.admissions] == ["team-a/long"]
    assert [a.job for a in never.admissions] == ["team-a/long"]
    assert [a.job for a in long_ago.admissions] == ["team-a/long"]


# --- a scale-up not yet seen to recur ----------------------------------------------------------

ONCE = DAILY[:1]
"""Prod scaled up on one day only: no hour is forecast yet."""
SERVING_QUOTAS = (builders.quota("prod", 16), builders.quota("team-a", 8))
SERVING = builders.gang(
    "serve", [("node-2", range(8))], tenant="prod", tier="prod-inference", max_runtime_s=None
)
"""Prod serves 8 of its nominal 16 on node 2: it may scale up into the other 8 at any time.
Node 0 runs days of unsaved work, so node 1 is the last place it could clear cheaply."""


def _unforeseen(
    job: PendingJob,
    *,
    running: tuple[RunningJob, ...] = (COSTLY, SERVING),
    quotas: tuple[TenantQuota, ...] = SERVING_QUOTAS,
) -> CycleResult:
    return _cycle(job, running=running, starts=ONCE, nodes=3, quotas=quotas)


def test_a_scale_up_not_yet_seen_to_recur_is_planned_for_at_once() -> None:
    """Prod's room (16 nominal, 8 in use) holds one replica of the 8 devices it started with,
    while it serves; a tenant serving nothing now, or one with a forecast, gets none."""
    book = QuotaBook(quotas=SERVING_QUOTAS, running=(SERVING,))
    serving_now = {(Tenant("prod"), GPU)}
    (rise,) = serving.unforeseen(ONCE, (), serving=serving_now, book=book, now=NOW, days=7)
    assert (rise.tenant, rise.replicas, rise.devices_per_replica, rise.days) == ("prod", 1, 8, 0)
    assert rise.at == NOW + serving.UNFORESEEN_CHEAP_S
    assert serving.unforeseen(ONCE, (), serving=set(), book=book, now=NOW, days=7) == ()
    foreseen = serving.rises(DAILY, now=NOW, days=7)
    assert (
        serving.unforeseen(DAILY, foreseen, serving=serving_now, book=book, now=NOW, days=7) == ()
    )


def test_before_it_recurs_a_job_pays_for_the_place_with_its_whole_run() -> None:
    """The scale-up may come at once and evict the job at its end: 8 x (20 h + 300 s) =
    578,400 device-s, met by its 8 idle devices and itself in 578,400 / 16 = 36,150 s."""
    result = _unforeseen(_long())
    assert _serving_refusal(result) == (
        "capacity: keeps a place cheap to clear for tenant prod's scale-up within its nominal "
        "quota (1 x 8, not yet seen to recur, so it may come at any time): the job would run "
        "past it without checkpoints; it takes the place in ~10h02m at the latest, when its "
        "idle devices will have cost what the scale-up would destroy"
    )
    assert result.decide_again_at == NOW + 36_150.0


def test_before_it_recurs_a_run_counts_up_to_a_day() -> None:
    """A run of 40 h counts as 24 h: 8 x (24 h + 300 s) / 16 = 43,350 s."""
    result = _unforeseen(_long(max_runtime_s=40 * HOUR))
    assert result.admissions == ()
    assert result.decide_again_at == NOW + 43_350.0


def test_before_it_recurs_a_job_ending_within_the_hour_takes_the_place() -> None:
    short = _unforeseen(_long(predicted_runtime_s=0.5 * HOUR))
    saves = _unforeseen(_long(checkpoint_interval_s=1_800.0))
    assert [a.job for a in short.admissions] == ["team-a/long"]
    assert [a.job for a in saves.admissions] == ["team-a/long"]


def test_before_it_recurs_nothing_is_kept_beyond_the_nominal_quota_or_once_the_service_went() -> (
    None
):
    """Prod serving its whole nominal has no room to scale into; prod serving nothing (its
    service deleted) has no service to scale."""
    full = (builders.quota("prod", 8), builders.quota("team-a", 8))
    no_room = _unforeseen(_long(), quotas=full)
    gone = _unforeseen(_long(), running=(COSTLY,))
    assert [a.job for a in no_room.admissions] == ["team-a/long"]
    assert [a.job for a in gone.admissions] == ["team-a/long"]
