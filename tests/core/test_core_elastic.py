"""Elastic gangs at their start (PRODUCT rule 13): the size rule of module `elastic`, and the
chosen size admitted all-or-nothing like any other gang."""

from __future__ import annotations

import builders
import pytest

from gangq.queue.core import cycle, elastic
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    TenantQuota,
)
from gangq.queue.core.owed import OwedDemand
from gangq.queue.core.quota import QuotaBook

NOW = 10_000.0
HOUR = 3600.0
QUOTAS = (builders.quota("team-a", 64), builders.quota("team-b", 64))
POLICY = Policy(preemption=False)
KEY = JobKey("team-a/elastic")


def _elastic(**overrides: object) -> PendingJob:
    """4 x 8 at most, 2 x 8 at least; one hour at 4 replicas by prediction, no bound."""
    values: dict[str, object] = {
        "replicas": 4,
        "min_replicas": 2,
        "per_replica": 8,
        "predicted_runtime_s": HOUR,
        "max_runtime_s": None,
        "submitted_at": 1.0,
    }
    return builders.job("elastic", **{**values, **overrides})  # type: ignore[arg-type]


def _busy(*nodes: str, ends_in_s: float | None, tier: str = "small") -> tuple[RunningJob, ...]:
    """One whole-node gang per node, each ending `ends_in_s` from now (None: never)."""
    return tuple(
        builders.gang(
            f"busy-{name}",
            [(name, range(8))],
            tier=tier,
            started_at=NOW - 10.0,
            max_runtime_s=None if ends_in_s is None else ends_in_s + 10.0,
        )
        for name in nodes
    )


def _cycle(
    *jobs: PendingJob,
    running: tuple[RunningJob, ...] = (),
    nodes: int = 4,
    quotas: tuple[TenantQuota, ...] = QUOTAS,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes), quotas=quotas, running=running, pending=jobs
    )
    return cycle.run_cycle(snapshot=snapshot, policy=POLICY, now=NOW, matcher=DeviceMatcher())


def _size(result: CycleResult, key: JobKey = KEY) -> int | None:
    """The replicas the job was admitted with; None when it was not admitted."""
    found = [a for a in result.admissions if a.job == key]
    return len(found[0].placement) if found else None


def test_the_maximum_starts_when_it_fits() -> None:
    result = _cycle(_elastic())
    assert _size(result) == 4


def test_the_largest_size_that_fits_starts_whole_on_distinct_nodes() -> None:
    """A size is one gang, all-or-nothing: replicas 0..size-1, each with all its devices."""
    result = _cycle(_elastic(min_replicas=1), running=_busy("node-3", ends_in_s=None))
    (admission,) = result.admissions
    assert [r.replica for r in admission.placement] == [0, 1, 2]
    assert len({r.node for r in admission.placement}) == 3
    assert all(len(r.devices) == 8 for r in admission.placement)


@pytest.mark.parametrize(
    ("frees_in_s", "size"),
    [
        pytest.param(10 * HOUR, 3, id="waiting-ends-later"),
        pytest.param(HOUR / 3, 3, id="ends-at-the-same-time"),
        pytest.param(HOUR / 3 - 60.0, None, id="waiting-ends-sooner"),
    ],
)
def test_a_smaller_size_starts_only_when_it_ends_no_later_than_waiting_for_the_maximum(
    frees_in_s: float, size: int | None
) -> None:
    """At 3 of 4 replicas the hour of work takes 4/3 h (device-time conserved); all 4,
    started when node-3 frees, take an hour from then."""
    result = _cycle(_elastic(), running=_busy("node-3", ends_in_s=frees_in_s))
    assert _size(result) == size


def test_a_job_that_waits_for_its_maximum_holds_a_reservation_for_it_and_says_why() -> None:
    result = _cycle(_elastic(), running=_busy("node-3", ends_in_s=600.0))
    assert _size(result) is None
    (reservation,) = result.reservations
    assert reservation.start_at == NOW + 600.0
    assert len(reservation.nodes) == 4
    reason = result.pending[KEY]
    assert reason.code is ReasonCode.CAPACITY
    assert reason.message == (
        "capacity: needs 4 nodes with 8 free gpu, 3 have them; reserved start in ~10m; "
        "all 4 replicas are predicted to end in ~1h10m, sooner than 3 started now (~1h20m)"
    )


def test_a_job_that_fits_at_no_size_reserves_for_its_minimum() -> None:
    running = _busy("node-0", "node-1", "node-2", ends_in_s=600.0)
    result = _cycle(_elastic(), running=running)
    assert _size(result) is None
    (reservation,) = result.reservations
    assert (reservation.start_at, len(reservation.nodes)) == (NOW + 600.0, 2)
    assert result.pending[KEY].message == (
        "capacity: needs 2 nodes with 8 free gpu, 1 has them; reserved start in ~10m"
    )


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(_elastic(predicted_runtime_s=None), id="no-runtime-known"),
        pytest.param(_elastic(tier="prod-inference", tenant="team-b"), id="long-running-tier"),
    ],
)
def test_a_job_whose_end_cannot_be_predicted_starts_at_the_largest_size_that_fits(
    job: PendingJob,
) -> None:
    """Node-3 frees in a minute, but without a runtime no wait can be weighed."""
    result = _cycle(job, running=_busy("node-3", ends_in_s=60.0))
    assert _size(result, job.key) == 3


def test_the_bound_stands_in_for_a_missing_prediction() -> None:
    job = _elastic(predicted_runtime_s=None, max_runtime_s=HOUR)
    result = _cycle(job, running=_busy("node-3", ends_in_s=600.0))
    assert _size(result) is None, "by its bound, all 4 end sooner than 3 started now"


@pytest.mark.parametrize(
    "running",
    [
        pytest.param(_busy("node-3", ends_in_s=None), id="held-by-a-gang-without-end"),
        pytest.param(_busy("node-3", ends_in_s=None, tier="prod-inference"), id="held-by-serving"),
    ],
)
def test_a_maximum_never_predicted_to_start_does_not_hold_back_a_smaller_size(
    running: tuple[RunningJob, ...],
) -> None:
    result = _cycle(_elastic(), running=running)
    assert _size(result) == 3


def test_a_maximum_larger_than_the_cluster_starts_at_what_fits_and_is_not_unschedulable() -> None:
    result = _cycle(_elastic(replicas=6, min_replicas=2))
    assert _size(result) == 4


def test_the_quota_limits_the_size() -> None:
    quotas = (builders.quota("team-a", 16, borrowing_limit=8), builders.quota("team-b", 64))
    result = _cycle(_elastic(), quotas=quotas)
    assert _size(result) == 3


def test_a_minimum_over_the_quota_waits_for_quota_at_that_size() -> None:
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 64))
    result = _cycle(_elastic(), quotas=quotas)
    assert result.pending[KEY].code is ReasonCode.UNSCHEDULABLE
    assert "needs 16 gpu" in result.pending[KEY].message


def test_the_smaller_gang_is_planned_to_end_at_its_scaled_runtime() -> None:
    """Started at 2 of 4, the hour of work takes two: a big job behind it is reserved for
    then, not for the hour its prediction at 4 replicas would say."""
    running = _busy("node-2", "node-3", ends_in_s=3 * HOUR)
    big = builders.job(
        "big", tenant="team-b", replicas=2, per_replica=8, max_runtime_s=None, submitted_at=2.0
    )
    result = _cycle(_elastic(), big, running=running)
    assert _size(result) == 2
    (reservation,) = result.reservations
    assert reservation.job == JobKey("team-b/big")
    assert reservation.start_at == NOW + 2 * HOUR


@pytest.mark.parametrize(
    ("size", "runtime"),
    [(4, HOUR), (2, 2 * HOUR), (1, 4 * HOUR), (3, HOUR * 4 / 3)],
)
def test_device_time_is_conserved_at_every_size(size: int, runtime: float) -> None:
    assert elastic.runtime_at(HOUR, size=size, replicas=4) == pytest.approx(runtime)
    assert elastic.work_of(runtime, size=size, replicas=4) == pytest.approx(HOUR)


def test_a_resized_job_keeps_its_bound_over_its_prediction() -> None:
    job = _elastic(predicted_runtime_s=HOUR, max_runtime_s=1.5 * HOUR)
    assert elastic.at_size(job, 2).predicted_runtime_s == 1.5 * HOUR
    assert elastic.at_size(job, 4) is job


def test_a_job_settled_smaller_owes_nothing_more() -> None:
    """The owed demand counted an elastic job at its maximum: once it starts smaller, its
    tenant is owed nothing for the replicas it does not run."""
    quotas = (builders.quota("team-a", 32),)
    book = QuotaBook(quotas=quotas, running=())
    owed = OwedDemand(book=book)
    job = _elastic()
    owed.expect([job])
    assert owed.of(job.tenant, builders.GPU) == 32
    started = elastic.at_size(job, 2)
    book.charge(job.tenant, builders.GPU, started.equivalent_milli)
    owed.settle(started)
    assert owed.of(job.tenant, builders.GPU) == 0


@pytest.mark.parametrize(
    ("bound_h", "size", "message"),
    [
        # at 2 of 4 the hour of work takes 2 h: past a 1.4 h bound, so the least size is 3
        pytest.param(
            1.4, None, "capacity: needs 3 nodes with 8 free gpu, 2 have them", id="2-outlasts-it"
        ),
        pytest.param(2.0, 2, None, id="2-ends-within-it"),
    ],
)
def test_no_size_starts_that_its_bound_would_stop_before_its_work_is_done(
    bound_h: float, size: int | None, message: str | None
) -> None:
    """Two nodes run gangs without end: only 2 replicas fit, and the maximum never will."""
    job = _elastic(max_runtime_s=bound_h * HOUR)
    result = _cycle(job, running=_busy("node-2", "node-3", ends_in_s=None))
    assert _size(result) == size
    if message is not None:
        assert result.pending[KEY].message == message


@pytest.mark.parametrize(
    "predicted_s", [pytest.param(None, id="none"), pytest.param(HOUR, id="the-bound")]
)
def test_without_a_prediction_below_the_bound_the_bound_stops_no_size(
    predicted_s: float | None,
) -> None:
    """The bound is a limit, not an estimate (a job with no history is predicted to run to it):
    the job may start at 2 of 4 beside two gangs without end, where the maximum never fits."""
    job = _elastic(predicted_runtime_s=predicted_s, max_runtime_s=HOUR)
    result = _cycle(job, running=_busy("node-2", "node-3", ends_in_s=None))
    assert _size(result) == 2
