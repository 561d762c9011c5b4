"""Never-fit is not wait: jobs the cluster as configured can never run say what must change."""

from __future__ import annotations

import dataclasses

import builders
import pytest

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    Inventory,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    Topology,
    TopologyMode,
)

ROOMY = (
    builders.quota("team-a", 64),
    builders.quota("team-b", 64),
    builders.quota("team-c", 32, borrowing_limit=4),
)
PRODUCT = 'device.attributes["gpu.example.com"].productName'


def _cycle(
    *jobs: PendingJob,
    running: tuple[RunningJob, ...] = (),
    inventory: Inventory | None = None,
    quotas: tuple[object, ...] = ROOMY,
    matcher: DeviceMatcher | None = None,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=inventory or builders.cluster(8, racks=2),
        quotas=quotas,  # type: ignore[arg-type]
        running=running,
        pending=jobs,
    )
    return cycle.run_cycle(
        snapshot=snapshot, policy=Policy(), now=1000.0, matcher=matcher or DeviceMatcher()
    )


def _zone(job: PendingJob) -> PendingJob:
    return dataclasses.replace(
        job, topology=Topology(key="example.com/zone", mode=TopologyMode.REQUIRED)
    )


PROD_ON_NODE_0 = builders.gang(
    "llm-prod", [("node-0", range(8))], tier="prod-inference", max_runtime_s=None
)


@pytest.mark.parametrize(
    ("job", "running", "message"),
    [
        pytest.param(
            builders.job("typo", selectors=[f'{PRODUCT} == "H200"']),
            (),
            "unschedulable: no gpu device matches the job's selectors: change spec.selectors",
            id="no-device-matches",
        ),
        pytest.param(
            builders.job("typed", selectors=[f"{PRODUCT} > 5"]),
            (),
            f"unschedulable: CEL selector '{PRODUCT} > 5' fails to evaluate: TypeError: No such "
            "overload",
            id="cel-type-error",
        ),
        pytest.param(
            builders.job("driver", selectors=["device.driver"]),
            (),
            "unschedulable: CEL selector 'device.driver' fails to evaluate: must evaluate to a "
            "bool, got str: fix spec.selectors",
            id="cel-not-a-bool",
        ),
        pytest.param(
            builders.job("wide", per_replica=1000),
            (),
            "unschedulable: needs 1000 gpu per replica, the most any node has is 8: lower "
            "devicesPerReplica",
            id="devices-per-replica",
        ),
        pytest.param(
            builders.job("greedy", tenant="team-c", replicas=5, per_replica=8),
            (),
            "unschedulable: needs 40 gpu, more than tenant team-c may ever use (nominal 32 + "
            "borrowing limit 4 = 36): ask for fewer devices or a larger quota",
            id="over-quota-for-ever",
        ),
        pytest.param(
            _zone(builders.job("zoned", replicas=2, per_replica=8)),
            (),
            "unschedulable: no node carries topology key example.com/zone: fix topology.key or "
            "use mode Preferred",
            id="topology-key-nowhere",
        ),
        pytest.param(
            builders.job("all", replicas=8, per_replica=8),
            (PROD_ON_NODE_0,),
            "unschedulable: needs 8 nodes with 8 gpu, the cluster has 7 beside long-running jobs "
            "of tier prod-inference it may not evict (team-b/llm-prod): ask for fewer replicas",
            id="beside-long-running",
        ),
    ],
)
def test_a_job_that_can_never_run_says_what_must_change(
    job: PendingJob, running: tuple[RunningJob, ...], message: str
) -> None:
    result = _cycle(job, running=running)
    reason = result.pending[job.key]
    assert reason.code is ReasonCode.UNSCHEDULABLE
    assert reason.message.startswith(message)
    # not waiting for anything: no place in line, no backfill reservation, nothing admitted
    assert job.key not in result.positions
    assert result.reservations == ()
    assert result.admissions == () and result.preemptions == ()


def test_never_fit_jobs_hold_no_position_and_leave_the_line_to_the_others() -> None:
    blocker = builders.gang("big", [(f"node-{i}", range(8)) for i in range(1, 8)], tier="training")
    never = builders.job("never", per_replica=1000, submitted_at=1.0)
    waiting = builders.job("waiting", replicas=2, per_replica=8, submitted_at=2.0)
    result = _cycle(never, waiting, running=(PROD_ON_NODE_0, blocker))
    assert result.positions == {JobKey("team-a/waiting"): 1}
    assert result.pending[JobKey("team-a/waiting")].code is ReasonCode.CAPACITY
    assert [r.job for r in result.reservations] == [JobKey("team-a/waiting")]


def test_a_never_fit_job_fits_again_once_the_cluster_changes() -> None:
    """Judged afresh every cycle: a prod scale-down or a new node lets the job run."""
    job = builders.job("all", replicas=8, per_replica=8)
    assert _cycle(job, running=(PROD_ON_NODE_0,)).pending[job.key].code is (
        ReasonCode.UNSCHEDULABLE
    )
    assert [a.job for a in _cycle(job).admissions] == [job.key]


def test_a_borrowing_or_lower_tier_long_running_gang_is_not_counted_as_lasting() -> None:
    """Reclaimable or evictable devices may come free: that is a wait, not a never-fit."""
    borrowing = dataclasses.replace(PROD_ON_NODE_0, borrowed=8)
    job = builders.job("all", replicas=8, per_replica=8)
    assert _cycle(job, running=(borrowing,)).pending[job.key].code is not (ReasonCode.UNSCHEDULABLE)
    prod = builders.job("prod", tier="prod-inference", replicas=8, per_replica=8)
    training = builders.gang("t", [("node-0", range(8))], tier="training")
    assert _cycle(prod, running=(training,)).pending[prod.key].code is not (
        ReasonCode.UNSCHEDULABLE
    )


def test_a_managed_class_without_its_device_class_is_the_clusters_problem() -> None:
    inventory = dataclasses.replace(builders.cluster(2), device_classes={})
    snapshot = Snapshot(inventory=inventory, quotas=ROOMY, running=(), pending=(builders.job("x"),))
    result = cycle.run_cycle(
        snapshot=snapshot,
        policy=Policy(managed_device_classes=("gpu",)),
        now=0.0,
        matcher=DeviceMatcher(),
    )
    assert result.pending[JobKey("team-a/x")].message == (
        "unschedulable: device class 'gpu' is managed by gangq but no DeviceClass of that name "
        "exists: an administrator must create it"
    )


def test_invalid_jobs_hold_no_position_either() -> None:
    result = _cycle(builders.job("gold", tier="gold"), builders.job("ok", per_replica=1))
    assert result.pending[JobKey("team-a/gold")].code is ReasonCode.INVALID
    assert JobKey("team-a/gold") not in result.positions
