"""Facts kept per inventory: built once per inventory object, never carried to another one, and
never changed by the cycles that read them."""

from __future__ import annotations

import dataclasses

from gangq.queue.core import derived
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceTaint
from gangq.queue.core.model import (
    Inventory,
    JobKey,
    NodeName,
    PodRequirements,
    ReplicaPlacement,
    RunningJob,
    Tenant,
)
from gangq.queue.core.pool import Pool, SelectorKey
from tests import builders


def test_facts_are_built_once_per_inventory_object_and_again_for_another() -> None:
    built: list[Inventory] = []

    def count(inventory: Inventory) -> int:
        built.append(inventory)
        return len(inventory.devices)

    facts = derived.PerInventory(count)
    first = builders.cluster(2)
    assert facts(first) == facts(first) == 16
    assert built == [first]
    equal = dataclasses.replace(first)
    assert equal == first and equal is not first
    assert facts(equal) == 16 and len(built) == 2, "identity, not equality, keys the memo"
    smaller = builders.cluster(1)
    assert facts(smaller) == 8
    assert facts(first) == 16 and len(built) == 4, "one entry: the current inventory"


def _running(key: str, node: str, *indexes: int) -> RunningJob:
    return RunningJob(
        key=JobKey(f"team-a/{key}"),
        uid=key,
        tenant=Tenant("team-a"),
        tier="training",
        priority=0,
        device_class=builders.GPU,
        placement=(
            ReplicaPlacement(
                0, NodeName(node), tuple(builders.device_id(node, i) for i in indexes)
            ),
        ),
        started_at=0.0,
    )


def _state(pool: Pool) -> tuple[object, ...]:
    return (
        {node: [d.name for d in devices] for node, devices in pool.free_by_node.items()},
        sorted(pool.free),
        sorted(pool._free_ids.values()),
        {k: [d.name for d in v] for k, v in pool._consumers.items()},
        pool.partitioned,
    )


def test_a_pool_on_a_known_inventory_equals_one_built_from_scratch_whatever_came_before() -> None:
    """Cycles on one inventory share its free candidates: what one cycle takes, and what its
    running gangs hold, must not show in the next one."""
    devices, counters = builders.partitioned_gpus("node-2", 1)
    plain = builders.cluster(2, held_by_others=[builders.device_id("node-1", 7)])
    broken = builders.device_id("node-1", 6)
    taint = DeviceTaint("broken", "", "NoSchedule")
    inventory = dataclasses.replace(
        plain,
        nodes={**plain.nodes, NodeName("node-2"): builders.node("node-2")},
        devices={
            **plain.devices,
            broken: dataclasses.replace(plain.devices[broken], taints=(taint,)),
            **{d.id: d for d in devices},
        },
        counters=counters,
    )
    matcher = DeviceMatcher()
    # A gang may hold a device tainted since, or one no slice publishes any more.
    holding = (
        _running("a", "node-0", 0, 1),
        _running("b", "node-1", 3, 6),
        _running("c", "node-9", 0),
    )
    busy = Pool(inventory=inventory, running=holding, matcher=matcher)
    assert builders.device_id("node-0", 0) not in busy.free
    assert builders.device_id("node-1", 7) not in busy.free, "held by others"
    assert broken not in busy.free and builders.device_id("node-1", 5) in busy.free
    taken = (builders.device_id("node-0", 2), builders.device_id("node-0", 3))
    busy.take(NodeName("node-0"), taken, PodRequirements())
    assert not busy.free & set(taken)
    for running in [(), holding[:1], holding]:
        again = Pool(inventory=inventory, running=running, matcher=matcher)
        fresh = Pool(inventory=dataclasses.replace(inventory), running=running, matcher=matcher)
        assert _state(again) == _state(fresh)
    assert (
        builders.device_id("node-0", 2)
        in Pool(inventory=inventory, running=(), matcher=matcher).free
    )


def _view(pool: Pool, key: SelectorKey) -> dict[str, list[str]]:
    return {node: [d.name for d in devices] for node, devices in pool.view(key).by_node.items()}


def test_a_view_on_a_known_inventory_equals_one_built_from_scratch_whatever_came_before() -> None:
    """Views reuse what a selector matched on each node none of whose candidates is taken:
    what running gangs hold, and what a take of this cycle or an earlier one took, must show
    as in a view of a pool built afresh."""
    inventory = builders.cluster(3)
    matcher = DeviceMatcher()
    every = (builders.GPU, (), ())
    numa = (builders.GPU, (f'device.attributes["{builders.DRIVER}"].numa == 1',), ())
    holding = (_running("a", "node-0", 0, 5), _running("b", "node-2", *range(8)))
    take = (NodeName("node-1"), (builders.device_id("node-1", 4),))
    for running in [(), holding[:1], holding, ()]:
        pools = [
            Pool(inventory=inventory, running=running, matcher=matcher),
            Pool(inventory=dataclasses.replace(inventory), running=running, matcher=matcher),
        ]
        assert _view(pools[0], every) == _view(pools[1], every)
        for pool in pools:
            pool.take(*take, PodRequirements())
        assert _view(pools[0], numa) == _view(pools[1], numa)
        assert _view(pools[0], every) == _view(pools[1], every)
        assert "gpu-4" not in _view(pools[0], numa)["node-1"]
        assert ("node-2" in _view(pools[0], every)) is (holding[1] not in running)
    assert _view(Pool(inventory=inventory, running=(), matcher=matcher), numa) == {
        node: ["gpu-4", "gpu-5", "gpu-6", "gpu-7"] for node in ("node-0", "node-1", "node-2")
    }
