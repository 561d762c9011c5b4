"""Gang placement through the cycle: best fit, constraints, topology, pod fit (rules 2, 7)."""

from __future__ import annotations

import builders
import pytest

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    Inventory,
    JobKey,
    PendingJob,
    PodRequirements,
    Policy,
    RunningJob,
    Snapshot,
    Taint,
    Toleration,
    TopologyMode,
)

QUOTAS = (builders.quota("team-a", 64),)


def _cycle(
    inventory: Inventory, *jobs: PendingJob, running: tuple[RunningJob, ...] = ()
) -> CycleResult:
    snapshot = Snapshot(inventory=inventory, quotas=QUOTAS, running=running, pending=jobs)
    return cycle.run_cycle(
        snapshot=snapshot, policy=Policy(backfill=False), now=0.0, matcher=DeviceMatcher()
    )


def _nodes(result: CycleResult, name: str) -> list[str]:
    admission = next(a for a in result.admissions if a.job == JobKey(f"team-a/{name}"))
    return [replica.node for replica in admission.placement]


def test_one_gpu_job_fills_the_partly_used_node_first() -> None:
    busy = builders.gang("busy", [("node-2", range(6))])
    result = _cycle(builders.cluster(4), builders.job("one"), running=(busy,))
    assert _nodes(result, "one") == ["node-2"]


def test_whole_node_job_avoids_partly_used_nodes_and_racks() -> None:
    """Best fit keeps whole racks free: the 8-GPU job goes to the rack already in use."""
    busy = builders.gang("busy", [("node-0", [0])])
    result = _cycle(
        builders.cluster(4, racks=2), builders.job("eight", per_replica=8), running=(busy,)
    )
    assert _nodes(result, "eight") == ["node-1"]


def test_gang_gets_distinct_nodes_all_or_nothing() -> None:
    result = _cycle(builders.cluster(3), builders.job("gang", replicas=3, per_replica=8))
    assert sorted(_nodes(result, "gang")) == ["node-0", "node-1", "node-2"]
    too_big = _cycle(builders.cluster(3), builders.job("gang", replicas=4, per_replica=8))
    assert too_big.admissions == ()
    assert too_big.pending[JobKey("team-a/gang")].message == (
        "unschedulable: needs 4 nodes with 8 gpu, the cluster has 3: ask for fewer replicas"
    )


def test_match_attribute_keeps_a_replica_on_one_numa_node() -> None:
    busy = builders.gang("busy", [("node-0", [0, 4])])
    job = builders.job("numa", per_replica=3, constraints=[builders.NUMA])
    result = _cycle(builders.cluster(1), job, running=(busy,))
    devices = result.admissions[0].placement[0].devices
    assert devices == tuple(builders.device_id("node-0", i) for i in (1, 2, 3))
    blocked = _cycle(
        builders.cluster(1),
        builders.job("numa", per_replica=4, constraints=[builders.NUMA]),
        running=(busy,),
    )
    assert blocked.pending[JobKey("team-a/numa")].message == (
        "capacity: needs 1 node with 4 free gpu sharing numa, 0 have them"
    )


def test_required_topology_picks_the_fullest_rack_that_fits() -> None:
    inventory = builders.cluster(6, racks=2)
    busy = builders.gang("busy", [("node-3", [0])])
    job = builders.job("rack", replicas=2, per_replica=8, topology=TopologyMode.REQUIRED)
    result = _cycle(inventory, job, running=(busy,))
    assert sorted(_nodes(result, "rack")) == ["node-4", "node-5"]


def test_required_topology_never_spreads_over_racks() -> None:
    job = builders.job("rack", replicas=4, per_replica=8, topology=TopologyMode.REQUIRED)
    result = _cycle(builders.cluster(6, racks=2), job)
    assert result.pending[JobKey("team-a/rack")].message == (
        "unschedulable: needs 4 nodes with 8 gpu in one rack, the largest rack has 3: ask for "
        "fewer replicas or use topology mode Preferred"
    )


def test_preferred_topology_falls_back_to_several_racks() -> None:
    job = builders.job("rack", replicas=4, per_replica=8, topology=TopologyMode.PREFERRED)
    result = _cycle(builders.cluster(6, racks=2), job)
    assert len(_nodes(result, "rack")) == 4
    same_rack = _cycle(
        builders.cluster(6, racks=2),
        builders.job("rack", replicas=3, per_replica=8, topology=TopologyMode.PREFERRED),
    )
    racks = {n[-1] for n in _nodes(same_rack, "rack")}
    assert racks in ({"0", "1", "2"}, {"3", "4", "5"})


@pytest.mark.parametrize(
    ("inventory", "pod", "code"),
    [
        pytest.param(
            builders.cluster(0, extra_nodes=[builders.node("node-0", unschedulable=True)]),
            PodRequirements(),
            ReasonCode.CAPACITY,
            id="cordoned",
        ),
        pytest.param(
            builders.cluster(0, extra_nodes=[builders.node("node-0", ready=False)]),
            PodRequirements(),
            ReasonCode.CAPACITY,
            id="not-ready",
        ),
        pytest.param(
            builders.cluster(0, extra_nodes=[builders.node("node-0", taints=[Taint("gpu", "x")])]),
            PodRequirements(),
            ReasonCode.UNSCHEDULABLE,
            id="untolerated-taint",
        ),
        pytest.param(
            builders.cluster(0, extra_nodes=[builders.node("node-0", cpu_milli=1000)]),
            PodRequirements(cpu_milli=2000),
            ReasonCode.CAPACITY,
            id="not-enough-cpu",
        ),
        pytest.param(
            builders.cluster(0, extra_nodes=[builders.node("node-0")]),
            PodRequirements(node_selector=(("pool", "a"),)),
            ReasonCode.UNSCHEDULABLE,
            id="node-selector",
        ),
    ],
)
def test_replica_goes_only_where_its_whole_pod_fits(
    inventory: Inventory, pod: PodRequirements, code: ReasonCode
) -> None:
    """A node's passing state (cordon, readiness, room) is a wait; its configuration (taints,
    labels) that no node ever admits the pod under is not."""
    result = _cycle(inventory, builders.job("pod", pod=pod))
    assert result.admissions == ()
    assert result.pending[JobKey("team-a/pod")].code is code


def test_toleration_lets_a_pod_onto_a_tainted_node() -> None:
    inventory = builders.cluster(
        0, extra_nodes=[builders.node("node-0", taints=[Taint("gpu", "x")])]
    )
    pod = PodRequirements(tolerations=(Toleration(key="gpu", operator="Exists"),))
    assert _nodes(_cycle(inventory, builders.job("pod", pod=pod)), "pod") == ["node-0"]


def test_cpu_of_admitted_replicas_counts_within_the_cycle() -> None:
    inventory = builders.cluster(0, extra_nodes=[builders.node("node-0", cpu_milli=3000)])
    pod = PodRequirements(cpu_milli=2000)
    result = _cycle(
        inventory, builders.job("a", pod=pod), builders.job("b", pod=pod, submitted_at=1)
    )
    assert [a.job for a in result.admissions] == [JobKey("team-a/a")]
    assert result.pending[JobKey("team-a/b")].message == (
        "capacity: needs 1 node with 1 free gpu, 0 have them (1 more lack cpu, memory or pod room)"
    )


def test_devices_held_by_others_tainted_or_reserved_are_never_used() -> None:
    held = [builders.device_id("node-0", i) for i in range(3)]
    inventory = builders.cluster(1, per_node=4, held_by_others=held)
    busy = builders.gang("busy", [("node-0", [3])])
    result = _cycle(inventory, builders.job("one"), running=(busy,))
    assert result.admissions == ()
    tainted = builders.cluster(0, extra_nodes=[builders.node("node-0")])
    devices = {d.id: d for d in builders.gpus("node-0", 2, tainted=[0])}
    tainted = Inventory(nodes=tainted.nodes, devices=devices, device_classes=tainted.device_classes)
    result = _cycle(tainted, builders.job("one"))
    assert result.admissions[0].placement[0].devices == (DeviceId(builders.device_id("node-0", 1)),)


def test_job_selectors_narrow_the_devices() -> None:
    inventory = builders.cluster(0, extra_nodes=[builders.node("node-0"), builders.node("node-1")])
    devices = {d.id: d for d in builders.gpus("node-0", 8, product="A100")}
    devices |= {d.id: d for d in builders.gpus("node-1", 8, product="H100")}
    inventory = Inventory(
        nodes=inventory.nodes, devices=devices, device_classes=inventory.device_classes
    )
    selector = f'device.attributes["{builders.DRIVER}"].productName == "H100"'
    result = _cycle(inventory, builders.job("h100", selectors=[selector]))
    assert _nodes(result, "h100") == ["node-1"]
