"""What the running gangs leave free, kept from cycle to cycle and brought up to date by the
gangs that started or ended, is what counting every gang afresh gives."""

from __future__ import annotations

import dataclasses
import random

import builders
import pytest

from gangq.queue.core import cycle, occupancy
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.model import Inventory, PodRequirements, RunningJob, Snapshot

NODES = 6
POD = PodRequirements(cpu_milli=4_000, memory_bytes=2**30)


def _afresh(inventory: Inventory, running: list[RunningJob]) -> occupancy.Occupancy:
    """Counted on an equal inventory of its own: nothing kept from earlier calls. What is
    kept is kept for one inventory only, so counts afresh go before the kept ones."""
    alone = dataclasses.replace(inventory)
    return occupancy.count(alone, occupancy.candidates(alone), running)


def _state(found: occupancy.Occupancy) -> tuple[object, ...]:
    return (
        {node: [d.id for d in devices] for node, devices in found.free_by_node().items()},
        list(found.free_by_node()),
        found.free,
        sorted(found.free_ids.values()),
        found.headroom,
    )


def _random_gang(name: str, free: dict[str, list[int]], rng: random.Random) -> RunningJob | None:
    nodes = [node for node, devices in free.items() if devices]
    if not nodes:
        return None
    placement = []
    for node in rng.sample(nodes, rng.randint(1, min(2, len(nodes)))):
        taken = rng.sample(free[node], rng.randint(1, len(free[node])))
        for index in taken:
            free[node].remove(index)
        placement.append((node, sorted(taken)))
    gang = builders.gang(name, placement)
    return dataclasses.replace(gang, pod=POD)


@pytest.mark.parametrize("seed", range(5))
def test_kept_and_updated_it_matches_a_fresh_count_at_every_step(seed: int) -> None:
    rng = random.Random(seed)
    inventory = builders.cluster(NODES)
    free = {f"node-{n}": list(range(8)) for n in range(NODES)}
    running: list[RunningJob] = []
    steps: list[list[RunningJob]] = []
    for step in range(120):
        if running and rng.random() < 0.45:
            ended = running.pop(rng.randrange(len(running)))
            for replica in ended.placement:
                free[replica.node] += [int(d.rsplit("-", 1)[1]) for d in replica.devices]
        else:
            gang = _random_gang(f"g{step}", free, rng)
            if gang is not None:
                running.append(gang)
        steps.append(list(running))
    expected = [_state(_afresh(inventory, gangs)) for gangs in steps]
    updated = 0
    for step, gangs in enumerate(steps):
        kept = occupancy.count(inventory, occupancy.candidates(inventory), gangs)
        updated += kept.incremental
        assert _state(kept) == expected[step], f"step {step}"
    assert updated == len(steps)


def test_a_device_held_by_two_gangs_is_counted_afresh_from_then_on() -> None:
    """Wrong input (the store forbids it), yet the one gang's end must not free the device
    the other still holds."""
    inventory = builders.cluster(1)
    base = occupancy.candidates(inventory)
    one = builders.gang("one", [("node-0", [0, 1])])
    other = builders.gang("other", [("node-0", [1, 2])])
    occupancy.count(inventory, base, [one])
    both = occupancy.count(inventory, base, [one, other])
    assert not both.incremental
    left = occupancy.count(inventory, base, [other])
    assert sorted(left.free) == sorted(_afresh(inventory, [other]).free)
    assert builders.device_id("node-0", 1) not in left.free


def test_a_cycle_after_gangs_end_and_start_decides_as_on_a_fresh_count() -> None:
    rng = random.Random(7)
    inventory = builders.cluster(NODES)
    free = {f"node-{n}": list(range(8)) for n in range(NODES)}
    running = [g for n in range(8) if (g := _random_gang(f"g{n}", free, rng)) is not None]
    pending = tuple(
        builders.job(f"j{n}", replicas=rng.randint(1, 2), per_replica=rng.randint(1, 8))
        for n in range(10)
    )
    quotas = (builders.quota("team-a", 64), builders.quota("team-b", 64))
    snapshots = [
        Snapshot(
            inventory=inventory, quotas=quotas, running=tuple(running[ended:]), pending=pending
        )
        for ended in range(len(running))
    ]
    fresh = [
        _decisions(dataclasses.replace(s, inventory=dataclasses.replace(inventory)))
        for s in snapshots
    ]
    assert [_decisions(s) for s in snapshots] == fresh


def _decisions(snapshot: Snapshot) -> tuple[object, ...]:
    result = cycle.run_cycle(snapshot=snapshot, policy=_POLICY, now=0.0, matcher=DeviceMatcher())
    return (result.admissions, result.pending, result.reservations)


_POLICY = dataclasses.replace(cycle.Policy(), preemption=False)
