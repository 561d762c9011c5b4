"""Queue order (PRODUCT rule 4), quotas (rule 3) and pending reasons through the cycle."""

from __future__ import annotations

import builders
import pytest

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    DeviceClass,
    Inventory,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    TenantQuota,
    TopologyMode,
)

ROOMY = (builders.quota("team-a", 64), builders.quota("team-b", 64), builders.quota("team-c", 64))


def _cycle(
    *jobs: PendingJob,
    quotas: tuple[TenantQuota, ...] = ROOMY,
    running: tuple[RunningJob, ...] = (),
    inventory: Inventory | None = None,
    policy: Policy | None = None,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=inventory or builders.cluster(2, per_node=2),
        quotas=quotas,
        running=running,
        pending=jobs,
    )
    return cycle.run_cycle(
        snapshot=snapshot,
        policy=policy or Policy(backfill=False, preemption=False),
        now=100.0,
        matcher=DeviceMatcher(),
    )


def _keys(*names: str) -> tuple[JobKey, ...]:
    return tuple(JobKey(name) for name in names)


@pytest.mark.parametrize(
    ("jobs", "quotas", "running", "expected"),
    [
        pytest.param(
            (
                builders.job("low", tier="small"),
                builders.job("high", tier="prod-inference", submitted_at=9),
            ),
            ROOMY,
            (),
            ("team-a/high", "team-a/low"),
            id="1-tier-first",
        ),
        pytest.param(
            (
                builders.job("borrower", tenant="team-a"),
                builders.job("within", tenant="team-b", submitted_at=9),
            ),
            (builders.quota("team-a", 0, borrowing_limit=8), builders.quota("team-b", 4)),
            (builders.gang("old", [("node-0", [0, 1])], tenant="team-b", tier="training"),),
            ("team-b/within", "team-a/borrower"),
            id="2-within-nominal-before-borrowers",
        ),
        pytest.param(
            (
                builders.job("heavy", tenant="team-a"),
                builders.job("light", tenant="team-b", submitted_at=9),
            ),
            (builders.quota("team-a", 8, weight=1), builders.quota("team-b", 8, weight=1)),
            (builders.gang("old", [("node-0", [0])], tenant="team-a", tier="training"),),
            ("team-b/light", "team-a/heavy"),
            id="3-lower-share-first",
        ),
        pytest.param(
            (
                builders.job("a", tenant="team-a"),
                builders.job("b", tenant="team-b", submitted_at=9),
            ),
            (builders.quota("team-a", 8, weight=1), builders.quota("team-b", 8, weight=4)),
            (
                builders.gang("a-old", [("node-0", [0])], tenant="team-a", tier="training"),
                builders.gang("b-old", [("node-1", [0, 1])], tenant="team-b", tier="training"),
            ),
            ("team-b/b", "team-a/a"),
            id="3-share-divided-by-weight",
        ),
        pytest.param(
            (
                builders.job("plain", tenant="team-a"),
                builders.job("urgent", tenant="team-b", priority=5, submitted_at=9),
            ),
            ROOMY,
            (),
            ("team-b/urgent", "team-a/plain"),
            id="4-priority",
        ),
        pytest.param(
            (
                builders.job("later", tenant="team-a", submitted_at=5),
                builders.job("earlier", tenant="team-b", submitted_at=1),
            ),
            ROOMY,
            (),
            ("team-b/earlier", "team-a/later"),
            id="5-submission-time",
        ),
    ],
)
def test_queue_order_follows_rule_4(
    jobs: tuple[PendingJob, ...],
    quotas: tuple[TenantQuota, ...],
    running: tuple[RunningJob, ...],
    expected: tuple[str, ...],
) -> None:
    assert _cycle(*jobs, quotas=quotas, running=running).order == _keys(*expected)


def test_fair_share_moves_with_admissions_inside_one_cycle() -> None:
    """Two tenants with equal weight alternate instead of one taking everything first."""
    jobs = [builders.job(f"a{i}", tenant="team-a", submitted_at=i) for i in range(3)]
    jobs += [builders.job(f"b{i}", tenant="team-b", submitted_at=10 + i) for i in range(3)]
    result = _cycle(*jobs, inventory=builders.cluster(2, per_node=8))
    assert [key.split("/")[0] for key in result.order] == ["team-a", "team-b"] * 3


def test_quota_caps_use_at_nominal_plus_borrowing_limit() -> None:
    quotas = (builders.quota("team-a", 1, borrowing_limit=1),)
    result = _cycle(*(builders.job(f"j{i}", submitted_at=i) for i in range(3)), quotas=quotas)
    assert [a.job for a in result.admissions] == list(_keys("team-a/j0", "team-a/j1"))
    assert [a.borrowed for a in result.admissions] == [0, 1]
    assert result.pending[JobKey("team-a/j2")].message == (
        "quota: tenant team-a uses 2/1 nominal, borrowing limit 1, job needs 1 gpu"
    )


def test_tenant_without_quota_gets_nothing_and_is_told_so() -> None:
    result = _cycle(builders.job("x", tenant="team-z"))
    assert result.pending[JobKey("team-z/x")].message == (
        "unschedulable: needs 1 gpu, more than tenant team-z may ever use (nominal 0 + "
        "borrowing limit 0 = 0): ask for fewer devices or a larger quota"
    )


def test_allowed_tiers_are_enforced() -> None:
    quotas = (builders.quota("team-a", 8, allowed_tiers=["small"]),)
    result = _cycle(builders.job("x", tier="training"), quotas=quotas)
    assert result.pending[JobKey("team-a/x")].message == (
        "unschedulable: tenant team-a may not use tier training (allowed: small): use an "
        "allowed tier"
    )


@pytest.mark.parametrize(
    ("job", "policy", "message"),
    [
        pytest.param(
            builders.job("x", tier="gold"),
            None,
            "invalid: spec.tier: unknown tier 'gold' (known: prod-inference, training, small)",
            id="tier",
        ),
        pytest.param(
            builders.job("x", per_replica=0),
            None,
            "invalid: replicas and devicesPerReplica must be at least 1",
            id="count",
        ),
        pytest.param(
            builders.job("x", device_class="fpga"),
            None,
            "invalid: device class 'fpga' does not exist",
            id="class",
        ),
        pytest.param(
            builders.job("x"),
            Policy(managed_device_classes=("other",)),
            "invalid: spec.deviceClassName: device class 'gpu' is not managed by gangq "
            "(managed: other)",
            id="unmanaged",
        ),
        pytest.param(
            builders.job("x", selectors=["device.driver =="]),
            None,
            "invalid: spec.selectors: CEL selector 'device.driver ==':",
            id="selector",
        ),
    ],
)
def test_invalid_jobs_say_what_to_fix(job: PendingJob, policy: Policy | None, message: str) -> None:
    result = _cycle(job, policy=policy)
    reason = result.pending[job.key]
    assert reason.code is ReasonCode.INVALID
    assert reason.message.startswith(message)


def test_bad_device_class_selector_is_the_clusters_problem_not_a_crash() -> None:
    inventory = builders.cluster(1)
    inventory = Inventory(
        nodes=inventory.nodes,
        devices=inventory.devices,
        device_classes={"gpu": DeviceClass("gpu", ("device.driver ==",))},
    )
    result = _cycle(builders.job("x"), inventory=inventory)
    assert result.pending[JobKey("team-a/x")].message.startswith(
        "unschedulable: DeviceClass gpu: CEL selector 'device.driver ==': ERROR"
    )


def test_positions_number_the_jobs_still_pending_in_queue_order() -> None:
    jobs = [builders.job(f"j{i}", per_replica=2, submitted_at=i) for i in range(4)]
    result = _cycle(*jobs, inventory=builders.cluster(1, per_node=2))
    assert [a.job for a in result.admissions] == [JobKey("team-a/j0")]
    assert result.positions == {
        JobKey("team-a/j1"): 1,
        JobKey("team-a/j2"): 2,
        JobKey("team-a/j3"): 3,
    }
    assert set(result.pending) == set(result.positions)


def test_stale_and_odd_inputs_are_decided_not_crashed_on() -> None:
    """Watch caches lag: gangs on deleted nodes or devices, devices without a node."""
    inventory = builders.cluster(2)
    loose = builders.gpus("node-9", 2)
    devices = dict(inventory.devices) | {
        d.id: type(d)(driver=d.driver, pool=d.pool, name=d.name, node=None) for d in loose
    }
    inventory = Inventory(
        nodes=inventory.nodes, devices=devices, device_classes=inventory.device_classes
    )
    ghost = builders.gang("ghost", [("node-9", [0, 1]), ("node-0", [7])], tier="small")
    jobs = (
        builders.job("huge", per_replica=40),
        builders.job("rack", replicas=2, per_replica=8, topology=TopologyMode.REQUIRED),
        builders.job("fine", tier="prod-inference", per_replica=7),
    )
    result = _cycle(*jobs, running=(ghost,), inventory=inventory, policy=Policy())
    assert [a.job for a in result.admissions] == [JobKey("team-a/fine")]
    assert result.pending[JobKey("team-a/huge")].message == (
        "unschedulable: needs 40 gpu per replica, the most any node has is 8: lower "
        "devicesPerReplica"
    )
    assert set(result.pending) == {JobKey("team-a/huge"), JobKey("team-a/rack")}
