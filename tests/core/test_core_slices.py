"""Partitions and shares of GPUs (rule 12) against a brute-force oracle.

The oracle knows nothing of the pool or the ledger: it sums, per counter set, what every
allocated device consumes and, per shared device, what every share takes, from the raw devices,
and it enumerates every pair of devices of a node to say whether a placement exists at all.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

import builders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.core import capacity, cycle, placement, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import (
    CounterSetId,
    Device,
    DeviceId,
    RequestPolicy,
    counter_set_id,
)
from gangq.queue.core.model import (
    Inventory,
    JobKey,
    NodeName,
    PendingJob,
    Policy,
    ReplicaPlacement,
    RunningJob,
    Share,
    Snapshot,
    Tenant,
)
from gangq.queue.core.pool import Pool

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GIB = builders.GIB_MILLI
MEMORY = f"{builders.DRIVER}/memory"
KINDS = ("whole", "1g.10gb", "3g.40gb", "shared")


def _rounded(policy: RequestPolicy | None, asked: int) -> int | None:
    """The policy's smallest allowed amount >= asked, by enumeration (the oracle's rounding)."""
    if policy is None:
        return asked
    if policy.valid_values:
        allowed: Iterable[int] = policy.valid_values
    else:
        low, high, step = policy.min or 0, policy.max or asked, policy.step or 1
        allowed = range(low, high + 1, step)
    return min((value for value in allowed if value >= asked), default=None)


def _consumed(device: Device, job: PendingJob) -> tuple[tuple[str, int], ...] | None:
    asked = dict(job.capacity_requests)
    if not device.multi:
        return () if all(device.capacity.get(MEMORY, 0) >= v for v in asked.values()) else None
    amount = asked.get("memory")
    policy = device.policies.get(MEMORY)
    taken = (policy.default if policy else None) if amount is None else _rounded(policy, amount)
    if taken is None or taken > device.capacity[MEMORY]:
        return None
    return ((MEMORY, taken),)


def _matches(job: PendingJob, device: Device) -> bool:
    wanted = job.selectors[0].split('"')[-2]
    return device.attributes[builders.PROFILE] == wanted


def _overcommits(inventory: Inventory, placements: Iterable[ReplicaPlacement]) -> list[str]:
    """Every counter or capacity over-commit and every exclusive device held twice."""
    held: dict[DeviceId, int] = {d: 1 for d in inventory.held_by_others}
    shares: dict[DeviceId, int] = {}
    for replica in placements:
        parts = {share.device: share.consumed for share in replica.shares}
        for device_id in replica.devices:
            held[device_id] = held.get(device_id, 0) + 1
            if device_id in parts:
                shares[device_id] = shares.get(device_id, 0) + dict(parts[device_id])[MEMORY]
    problems = []
    used: dict[CounterSetId, dict[str, int]] = {}
    for device_id, times in held.items():
        device = inventory.devices[device_id]
        if not device.multi and times > 1:
            problems.append(f"{device_id} held {times} times")
        for set_id, amounts in device.consumes:
            for name, amount in amounts.items():
                used.setdefault(set_id, {})[name] = used.get(set_id, {}).get(name, 0) + amount
    for set_id, amounts in used.items():
        for name, amount in amounts.items():
            if amount > inventory.counters[set_id][name]:
                problems.append(f"counter {set_id}/{name}: {amount} used")
    for device_id, amount in shares.items():
        if amount > inventory.devices[device_id].capacity[MEMORY]:
            problems.append(f"{device_id}: shares of {amount} exceed its capacity")
    return problems


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    devices: dict[DeviceId, Device] = {}
    counters: dict[CounterSetId, dict[str, int]] = {}
    nodes = [builders.node(f"node-{i}") for i in range(draw(st.integers(1, 2)))]
    for node in nodes:
        parted, sets = builders.partitioned_gpus(node.name, draw(st.integers(1, 2)))
        counters.update(sets)
        for device in parted + builders.shared_gpus(node.name, draw(st.integers(0, 1))):
            devices[device.id] = device
    ids = sorted(devices)
    running = []
    for index, device_id in enumerate(draw(st.lists(st.sampled_from(ids), max_size=3))):
        device = devices[device_id]
        share = (Share(device_id, ((MEMORY, 20 * GIB),)),) if device.multi else ()
        running.append(
            RunningJob(
                key=JobKey(f"team-b/run-{index}"),
                uid=f"run-{index}",
                tenant=Tenant("team-b"),
                tier="small",
                priority=0,
                device_class=builders.GPU,
                placement=(ReplicaPlacement(0, NodeName(device.node or ""), (device_id,), share),),
                started_at=0.0,
            )
        )
    inventory = Inventory(
        nodes={n.name: n for n in nodes},
        devices=devices,
        device_classes={builders.GPU: builders.GPU_CLASS},
        counters=counters,
        topology_keys=(builders.RACK,),
    )
    if _overcommits(inventory, [r for g in running for r in g.placement]):
        running = []
    pending = []
    for index in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(KINDS))
        requests: tuple[tuple[str, int], ...] = ()
        if kind == "shared":
            gib = draw(st.sampled_from([None, 1, 7, 30, 75]))
            requests = () if gib is None else (("memory", gib * GIB - draw(st.integers(0, 5))),)
        job = builders.job(
            f"job-{index}",
            replicas=draw(st.integers(1, 2)),
            per_replica=draw(st.integers(1, 2)),
            selectors=(builders.profile_selector(kind),),
            submitted_at=float(index),
            tier="small",
        )
        pending.append(replace(job, capacity_requests=requests))
    quotas = (builders.quota("team-a", 100), builders.quota("team-b", 100))
    return Snapshot(
        inventory=inventory, quotas=quotas, running=tuple(running), pending=tuple(pending)
    )


@SETTINGS
@given(clusters())
def test_a_cycle_never_overcommits_counters_or_capacity(snapshot: Snapshot) -> None:
    result = cycle.run_cycle(
        snapshot=snapshot, policy=Policy(), now=1000.0, matcher=DeviceMatcher()
    )
    jobs = {job.key: job for job in snapshot.pending}
    placed = [r for g in snapshot.running for r in g.placement]
    for admission in result.admissions:
        job = jobs[admission.job]
        for replica in admission.placement:
            devices = [snapshot.inventory.devices[d] for d in replica.devices]
            assert all(_matches(job, d) for d in devices)
            assert len(set(replica.devices)) == job.devices_per_replica
            for share in replica.shares:
                assert share.consumed == _consumed(snapshot.inventory.devices[share.device], job)
            assert {s.device for s in replica.shares} == {d.id for d in devices if d.multi}
        placed.extend(admission.placement)
    assert _overcommits(snapshot.inventory, placed) == []


def _fits_somewhere(
    inventory: Inventory, job: PendingJob, placed: Sequence[ReplicaPlacement]
) -> bool:
    """Brute force: some node has `devices_per_replica` matching devices that, added to what
    is placed, over-commit nothing (single-replica jobs only)."""
    for node in inventory.nodes:
        candidates = [
            d
            for d in inventory.devices.values()
            if d.node == node and _matches(job, d) and _consumed(d, job) is not None
        ]
        for group in itertools.combinations(candidates, job.devices_per_replica):
            replica = ReplicaPlacement(
                0,
                node,
                tuple(d.id for d in group),
                tuple(Share(d.id, _consumed(d, job) or ()) for d in group if d.multi),
            )
            if not _overcommits(inventory, [*placed, replica]):
                return True
    return False


@SETTINGS
@given(clusters())
def test_placement_finds_a_slice_whenever_one_exists(snapshot: Snapshot) -> None:
    """Jobs placed one after another on one pool: a single-replica job is placed exactly when
    the oracle finds some set of devices for it."""
    pool = Pool(inventory=snapshot.inventory, running=snapshot.running, matcher=DeviceMatcher())
    placed = [r for g in snapshot.running for r in g.placement]
    for queued in snapshot.pending:
        job = replace(queued, replicas=1)
        shape = placement.Shape.of(job)
        choice = placement.place(shape, pool)
        exists = _fits_somewhere(snapshot.inventory, job, placed)
        if isinstance(choice, placement.Shortfall):
            assert not exists, f"{job.key} not placed though a placement exists"
            continue
        (replica,) = placement.as_placement(choice, shape, pool)
        placed.append(replica)
        assert _overcommits(snapshot.inventory, placed) == []
        pool.take(replica.node, replica.devices, job.pod, shares=replica.shares)


def test_small_slices_go_to_a_gpu_already_broken() -> None:
    devices, counters = builders.partitioned_gpus("node-0", 2)
    inventory = Inventory(
        nodes={NodeName("node-0"): builders.node("node-0")},
        devices={d.id: d for d in devices},
        device_classes={builders.GPU: builders.GPU_CLASS},
        counters=counters,
    )
    first = DeviceId(f"{builders.DRIVER}/node-0/gpu-1-1g.10gb-0")
    running = RunningJob(
        key=JobKey("team-b/small-0"),
        uid="small-0",
        tenant=Tenant("team-b"),
        tier="small",
        priority=0,
        device_class=builders.GPU,
        placement=(ReplicaPlacement(0, NodeName("node-0"), (first,)),),
        started_at=0.0,
    )
    pool = Pool(inventory=inventory, running=(running,), matcher=DeviceMatcher())
    job = builders.job("small", selectors=(builders.profile_selector("1g.10gb"),))
    shape = placement.Shape.of(job)
    for _ in range(6):
        choice = placement.place(shape, pool)
        assert not isinstance(choice, placement.Shortfall)
        (replica,) = placement.as_placement(choice, shape, pool)
        assert replica.devices[0].startswith(f"{builders.DRIVER}/node-0/gpu-1-")
        pool.take(replica.node, replica.devices, job.pod)
    whole = builders.job("whole", selectors=(builders.profile_selector("whole"),))
    choice = placement.place(placement.Shape.of(whole), pool)
    assert not isinstance(choice, placement.Shortfall)
    assert [d.name for _, chosen in choice for d in chosen] == ["gpu-0"]
    pair = placement.Shape.of(whole)._replace(devices_per_replica=2)
    assert isinstance(placement.place(pair, pool), placement.Shortfall)


def test_round_up_follows_the_request_policy() -> None:
    steps = RequestPolicy(default=10, min=4, max=80, step=4)
    assert [steps.round_up(n) for n in (1, 4, 5, 80, 81)] == [4, 4, 8, 80, None]
    values = RequestPolicy(default=33, valid_values=(33, 66, 132))
    assert [values.round_up(n) for n in (1, 34, 132, 133)] == [33, 66, 132, None]
    device = builders.shared_gpus("node-0")[0]
    assert sharing.consumption(device, ()) == ((MEMORY, 10 * GIB),)
    assert sharing.consumption(device, (("memory", GIB + 1),)) == ((MEMORY, 2 * GIB),)
    assert sharing.consumption(device, (("memory", 81 * GIB),)) is None
    assert sharing.consumption(device, (("cores", 1),)) is None


def test_gpu_equivalents_of_partitions_and_shares() -> None:
    devices, counters = builders.partitioned_gpus("node-0", 1)
    by_profile: Mapping[str, Device] = {str(d.attributes[builders.PROFILE]): d for d in devices}
    assert sharing.equivalent(by_profile["whole"], (), counters) == 1000
    seventh = sharing.equivalent(by_profile["1g.10gb"], (), counters)
    assert seventh == Fraction(1000, 7), "one of seven compute slices, exactly"
    assert sharing.format_equivalent(seventh) == "0.143"
    assert sharing.format_equivalent(7 * seventh) == "1"
    assert sharing.equivalent(by_profile["3g.40gb"], (), counters) == 500
    shared = builders.shared_gpus("node-0")[0]
    assert sharing.equivalent(shared, ((MEMORY, 20 * GIB),), counters) == 250


def test_a_share_no_device_can_give_is_unschedulable_with_its_reason() -> None:
    devices = builders.shared_gpus("node-0")
    inventory = Inventory(
        nodes={NodeName("node-0"): builders.node("node-0")},
        devices={d.id: d for d in devices},
        device_classes={builders.GPU: builders.GPU_CLASS},
    )
    job = replace(
        builders.job("huge", selectors=(builders.profile_selector("shared"),)),
        capacity_requests=(("memory", 81 * GIB),),
    )
    fitting = replace(job, key=JobKey("team-a/fits"), capacity_requests=(("memory", 80 * GIB),))
    snapshot = Snapshot(
        inventory=inventory, quotas=(builders.quota("team-a", 8),), pending=(job, fitting)
    )
    result = cycle.run_cycle(snapshot=snapshot, policy=Policy(), now=0.0, matcher=DeviceMatcher())
    assert [a.job for a in result.admissions] == ["team-a/fits"]
    reason = result.pending[job.key]
    assert reason.code == "unschedulable"
    assert "can give memory 81Gi" in reason.message


def test_quotas_count_partitions_as_their_share_of_the_gpu() -> None:
    """Nominal 1 GPU: seven 1g.10gb slices fit exactly, an eighth does not; the reason says
    how much is used in GPU-equivalents."""
    devices, counters = builders.partitioned_gpus("node-0", 2)
    inventory = Inventory(
        nodes={NodeName("node-0"): builders.node("node-0")},
        devices={d.id: d for d in devices},
        device_classes={builders.GPU: builders.GPU_CLASS},
        counters=counters,
    )
    jobs = tuple(
        builders.job(f"s{i}", selectors=(builders.profile_selector("1g.10gb"),), submitted_at=i)
        for i in range(8)
    )
    snapshot = Snapshot(inventory=inventory, quotas=(builders.quota("team-a", 1),), pending=jobs)
    result = cycle.run_cycle(snapshot=snapshot, policy=Policy(), now=0.0, matcher=DeviceMatcher())
    assert len(result.admissions) == 7
    assert all(a.borrowed == 0 for a in result.admissions)
    reason = result.pending[JobKey("team-a/s7")]
    assert reason.message.startswith("quota: tenant team-a uses 1/1 nominal")
    assert "job needs 0.143 gpu" in reason.message
    whole = builders.job("w", selectors=(builders.profile_selector("whole"),), submitted_at=-1)
    half = Snapshot(
        inventory=inventory, quotas=(builders.quota("team-a", 1),), pending=(whole, *jobs[:1])
    )
    result = cycle.run_cycle(snapshot=half, policy=Policy(), now=0.0, matcher=DeviceMatcher())
    assert [a.job for a in result.admissions] == ["team-a/w"], "a whole GPU fills the quota"


def test_single_unit_placement_counters_do_not_make_a_slice_a_whole_gpu() -> None:
    """NVIDIA's driver adds one counter of value 1 per memory slice a MIG device sits on: they
    say where, not how much."""
    counter_set = counter_set_id(builders.DRIVER, "node-0", "gpu-0-counter-set")
    counters = {
        counter_set: {"multiprocessors": 132_000, "memory-slice-0": 1000, "memory-slice-1": 1000}
    }
    mig = Device(
        driver=builders.DRIVER,
        pool="node-0",
        name="gpu-0-mig-19-0-1",
        node="node-0",
        consumes=((counter_set, {"multiprocessors": 16_000, "memory-slice-0": 1000}),),
    )
    assert sharing.equivalent(mig, (), counters) == Fraction(16 * 1000, 132)
    only_slices = dataclasses.replace(mig, consumes=((counter_set, {"memory-slice-0": 1000}),))
    assert sharing.equivalent(only_slices, (), counters) == 1000


def test_the_capacity_view_counts_a_partitioned_gpu_once_in_gpu_equivalents() -> None:
    devices, counters = builders.partitioned_gpus("node-0", 2)
    plain = builders.gpus("node-1", 2)
    inventory = Inventory(
        nodes={NodeName(n): builders.node(n) for n in ("node-0", "node-1")},
        devices={d.id: d for d in [*devices, *plain]},
        device_classes={builders.GPU: builders.GPU_CLASS},
        counters=counters,
    )
    partition = DeviceId(f"{builders.DRIVER}/node-0/gpu-0-1g.10gb-0")
    report = capacity.summarize(
        inventory, frozenset({partition, builders.device_id("node-1", 0)}), matcher=DeviceMatcher()
    )
    usage = report.classes[builders.GPU]
    assert usage.total == 4, "two partitioned GPUs and two plain ones"
    assert usage.by_state["reserved"] == 1.143
    assert usage.by_state["free"] == 2.857
    assert report.nodes["node-0"][builders.GPU].largest_replica == 1.857
    assert usage.whole_node_replicas == 0
    totals = capacity.summarize(
        inventory,
        frozenset({partition, builders.device_id("node-1", 0)}),
        matcher=DeviceMatcher(),
        scopes=False,
    )
    assert totals.classes == report.classes, "the gauges' totals are the full view's"
    assert not totals.nodes and not totals.domains


def _holding(name: str, *devices: str, tier: str = "small") -> RunningJob:
    return RunningJob(
        key=JobKey(f"team-b/{name}"),
        uid=name,
        tenant=Tenant("team-b"),
        tier=tier,
        priority=0,
        device_class=builders.GPU,
        placement=(
            ReplicaPlacement(
                0,
                NodeName("node-0"),
                tuple(DeviceId(f"{builders.DRIVER}/node-0/{d}") for d in devices),
            ),
        ),
        started_at=0.0,
    )


def test_a_slice_job_alone_on_a_gpu_is_a_victim_that_frees_the_whole_gpu() -> None:
    """prod-inference needs the one whole GPU: evicting the slice job that alone breaks it
    frees it; where two jobs share the GPU, neither alone would, and nobody is evicted."""
    devices, counters = builders.partitioned_gpus("node-0", 1)
    inventory = Inventory(
        nodes={NodeName("node-0"): builders.node("node-0")},
        devices={d.id: d for d in devices},
        device_classes={builders.GPU: builders.GPU_CLASS},
        counters=counters,
    )
    serving = builders.job(
        "serve", tier="prod-inference", selectors=(builders.profile_selector("whole"),)
    )
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 8))
    alone = Snapshot(
        inventory=inventory,
        quotas=quotas,
        running=(_holding("small", "gpu-0-1g.10gb-0"),),
        pending=(serving,),
    )
    result = cycle.run_cycle(snapshot=alone, policy=Policy(), now=1000.0, matcher=DeviceMatcher())
    assert [v.job for p in result.preemptions for v in p.victims] == ["team-b/small"]
    shared = replace(
        alone,
        running=(_holding("a", "gpu-0-1g.10gb-0"), _holding("b", "gpu-0-1g.10gb-1")),
    )
    result = cycle.run_cycle(snapshot=shared, policy=Policy(), now=1000.0, matcher=DeviceMatcher())
    assert result.preemptions == ()
    assert result.pending[serving.key].code == "capacity"
