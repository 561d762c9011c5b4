"""Properties of the scheduling cycle over random small clusters and queues (rules 1-4, 7).

The oracle here is written independently of `placement`: it counts, per node, the largest group
of free devices sharing the constrained attributes and checks the gang shape against that.
"""

from __future__ import annotations

import builders
import core_oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.core import cycle, fit
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    Inventory,
    JobKey,
    PodRequirements,
    Policy,
    RunningJob,
    Snapshot,
    TopologyMode,
)

PRODUCT_H100 = f'device.attributes["{builders.DRIVER}"].productName == "H100"'
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw: st.DrawFn) -> Snapshot:
    node_count = draw(st.integers(1, 6))
    racks = draw(st.integers(1, 3))
    nodes = [
        builders.node(
            f"node-{i}",
            rack=f"rack-{i % racks}",
            cpu_milli=draw(st.sampled_from([8_000, 64_000])),
            unschedulable=draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(node_count)
    ]
    devices: dict[DeviceId, Device] = {}
    for n in nodes:
        count = draw(st.integers(1, 8))
        product = draw(st.sampled_from(["H100", "A100"]))
        tainted = draw(st.sets(st.integers(0, count - 1), max_size=1))
        for d in builders.gpus(n.name, count, product=product, tainted=tainted):
            devices[d.id] = d
    ids = sorted(devices)
    held = draw(st.sets(st.sampled_from(ids), max_size=3))
    busy = sorted(set(ids) - held)
    running: list[RunningJob] = []
    for index in range(draw(st.integers(0, 3))):
        taken = draw(st.lists(st.sampled_from(busy), max_size=3, unique=True)) if busy else []
        taken = [d for d in taken if all(d not in r.devices for g in running for r in g.placement)]
        if not taken:
            continue
        node_name = devices[taken[0]].node or ""
        on_node = [int(d.rsplit("-", 1)[1]) for d in taken if devices[d].node == node_name]
        running.append(builders.gang(f"run-{index}", [(node_name, on_node)], tenant="team-b"))
    inventory = Inventory(
        nodes={n.name: n for n in nodes},
        devices=devices,
        device_classes={builders.GPU: builders.GPU_CLASS},
        held_by_others=frozenset(held),
        topology_keys=(builders.RACK,),
    )
    pending = []
    for index in range(draw(st.integers(1, 8))):
        pending.append(
            builders.job(
                f"job-{index}",
                tenant=draw(st.sampled_from(["team-a", "team-b", "team-c"])),
                tier=draw(st.sampled_from(["prod-inference", "training", "small"])),
                priority=draw(st.integers(0, 2)),
                replicas=draw(st.integers(1, 3)),
                per_replica=draw(st.integers(1, 4)),
                selectors=draw(st.sampled_from([(), (PRODUCT_H100,)])),
                constraints=draw(st.sampled_from([(), (builders.NUMA,)])),
                topology=draw(st.sampled_from(list(TopologyMode))),
                submitted_at=float(draw(st.integers(0, 5))),
                pod=PodRequirements(cpu_milli=draw(st.sampled_from([0, 6_000]))),
            )
        )
    quotas = (
        builders.quota("team-a", draw(st.integers(0, 8)), borrowing_limit=draw(st.integers(0, 8))),
        builders.quota("team-b", 8, borrowing_limit=draw(st.integers(0, 16))),
        builders.quota("team-c", draw(st.integers(0, 4))),
    )
    return Snapshot(
        inventory=inventory, quotas=quotas, running=tuple(running), pending=tuple(pending)
    )


def _run(snapshot: Snapshot, *, policy: Policy) -> CycleResult:
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=1000.0, matcher=DeviceMatcher())


@SETTINGS
@given(scenarios())
def test_admissions_are_whole_disjoint_matching_and_within_quota(snapshot: Snapshot) -> None:
    result = _run(snapshot, policy=Policy())
    jobs = {job.key: job for job in snapshot.pending}
    free = core_oracle.initially_free(snapshot)
    seen: set[DeviceId] = set()
    used = {(q.tenant, q.device_class): 0 for q in snapshot.quotas}
    for gang in snapshot.running:
        used[(gang.tenant, gang.device_class)] += gang.device_count
    for admission in result.admissions:
        job = jobs[admission.job]
        assert len(admission.placement) == job.replicas
        assert len({r.node for r in admission.placement}) == job.replicas
        for replica in admission.placement:
            assert len(replica.devices) == job.devices_per_replica
            assert len(set(replica.devices)) == job.devices_per_replica
            for device_id in replica.devices:
                assert device_id in free, "a device that was not free"
                assert device_id not in seen, "one device in two placements"
                seen.add(device_id)
                device = snapshot.inventory.devices[device_id]
                assert device.node == replica.node
                assert core_oracle.is_matching(job, device)
            if job.constraints:
                numa = {
                    snapshot.inventory.devices[d].attributes[builders.NUMA] for d in replica.devices
                }
                assert len(numa) == 1
            assert fit.is_accepted(snapshot.inventory.nodes[replica.node], job.pod)
        if job.topology.mode is TopologyMode.REQUIRED:
            racks = {
                snapshot.inventory.nodes[r.node].labels[builders.RACK] for r in admission.placement
            }
            assert len(racks) == 1
        used[(job.tenant, job.device_class)] += job.device_count
    for quota in snapshot.quotas:
        assert used[(quota.tenant, quota.device_class)] <= max(
            quota.nominal + quota.borrowing_limit,
            sum(g.device_count for g in snapshot.running if g.tenant == quota.tenant),
        )
    assert set(result.pending) | {a.job for a in result.admissions} == set(jobs)
    assert not set(result.pending) & {a.job for a in result.admissions}


@SETTINGS
@given(scenarios())
def test_no_later_job_takes_devices_an_earlier_pending_job_could_use(snapshot: Snapshot) -> None:
    """Replay the cycle's order: a job left pending for capacity was infeasible at its turn."""
    result = _run(snapshot, policy=Policy(preemption=False, backfill=False))
    jobs = {job.key: job for job in snapshot.pending}
    admissions = {a.job: a for a in result.admissions}
    free = core_oracle.initially_free(snapshot)
    cpu = core_oracle.cpu_left(snapshot)
    for key in result.order:
        job = jobs[key]
        if key in admissions:
            for replica in admissions[key].placement:
                free -= set(replica.devices)
                cpu[replica.node] -= job.pod.cpu_milli
        elif result.pending[key].code is ReasonCode.CAPACITY:
            assert not core_oracle.is_feasible(job, snapshot, free, cpu), result.pending[
                key
            ].message


@SETTINGS
@given(scenarios())
def test_same_input_same_output(snapshot: Snapshot) -> None:
    first = _run(snapshot, policy=Policy())
    second = _run(snapshot, policy=Policy())
    assert first == second


def test_order_replay_covers_admissions_and_pending() -> None:
    """The replay above relies on `order` listing every pending job exactly once."""
    snapshot = Snapshot(
        inventory=builders.cluster(1, per_node=2),
        quotas=(builders.quota("team-a", 8),),
        pending=(builders.job("a", per_replica=2), builders.job("b", per_replica=2)),
    )
    result = _run(snapshot, policy=Policy())
    assert sorted(result.order) == [JobKey("team-a/a"), JobKey("team-a/b")]
    assert [a.job for a in result.admissions] == [JobKey("team-a/a")]
    assert result.pending[JobKey("team-a/b")].code is ReasonCode.CAPACITY
