"""Reading partitionable and shared devices from the ResourceSlices a 1.36 API server stored
(reference cases 10-04, 10-05, 10-13), and the placement rule 12 asks for on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gangq.queue.core import placement
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import RequestPolicy, counter_set_id, device_id
from gangq.queue.core.inventory import build_inventory
from gangq.queue.core.model import Inventory, JobKey, PendingJob, Tenant
from gangq.queue.core.pool import Pool

REFERENCE = Path(__file__).parents[1] / "contract" / "reference"
DRIVER = "part.example.com"
GI = 2**30 * 1000


def _stored(case: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REFERENCE / f"{case}.json").read_text())["response"]["body"]
    return body


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _inventory(claims: list[dict[str, Any]] | None = None) -> Inventory:
    return build_inventory(
        slices=[
            _stored("10-04-resourceslice-counters-only-201"),
            _stored("10-05-resourceslice-devices-consuming-counters-201"),
            _stored("10-13-resourceslice-consumable-capacity-201"),
        ],
        nodes=[_node("part-0"), _node("part-1")],
        claims=claims or [],
        device_classes=[
            {
                "metadata": {"name": "part"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        ],
    )


def _job(name: str, kind: str, requests: tuple[tuple[str, int], ...] = ()) -> PendingJob:
    return PendingJob(
        key=JobKey(f"team-a/{name}"),
        uid=name,
        tenant=Tenant("team-a"),
        tier="small",
        device_class="part",
        selectors=(f'device.attributes["{DRIVER}"].type == "{kind}"',),
        capacity_requests=requests,
    )


def test_counters_are_read_from_another_slice_of_the_pool() -> None:
    inventory = _inventory()
    gpu_0_cs = counter_set_id(DRIVER, "part-0", "gpu-0-cs")
    assert inventory.counters[gpu_0_cs] == {"memory": 80 * GI, "multiprocessors": 132_000}
    mig = inventory.devices[device_id(DRIVER, "part-0", "gpu-0-mig-0")]
    assert mig.consumes == ((gpu_0_cs, {"memory": 40 * GI, "multiprocessors": 60_000}),)
    shared = inventory.devices[device_id(DRIVER, "part-1-shared", "shared-gpu-0")]
    assert shared.multi
    assert shared.policies[f"{DRIVER}/memory"] == RequestPolicy(
        default=10 * GI, min=GI, max=80 * GI, step=GI
    )
    assert shared.policies[f"{DRIVER}/multiprocessors"].valid_values == (33_000, 66_000, 132_000)
    assert not inventory.devices[device_id(DRIVER, "part-1-shared", "excl-gpu-1")].multi


def test_a_whole_gpu_and_its_partition_never_go_together() -> None:
    pool = Pool(inventory=_inventory(), running=(), matcher=DeviceMatcher())
    mig = placement.Shape.of(_job("mig", "mig-3g.40gb"))
    choice = placement.place(mig, pool)
    assert not isinstance(choice, placement.Shortfall)
    (replica,) = placement.as_placement(choice, mig, pool)
    pool.take(replica.node, replica.devices, mig.pod)
    whole = placement.Shape.of(_job("whole", "gpu"))
    names = set()
    while not isinstance(choice := placement.place(whole, pool), placement.Shortfall):
        (replica,) = placement.as_placement(choice, whole, pool)
        names.update(d.rsplit("/", 1)[1] for d in replica.devices)
        pool.take(replica.node, replica.devices, whole.pod, shares=replica.shares)
    assert "gpu-0" not in names, "gpu-0 is partitioned"
    assert {"gpu-1", "excl-gpu-1"} <= names


def test_shares_are_rounded_and_bounded_by_the_capacity() -> None:
    claim = json.loads(
        (
            REFERENCE / "10-22-resourceclaim-status-allocate-consumedcapacity-shareid-200.json"
        ).read_text()
    )["response"]["body"]
    inventory = _inventory([claim])
    shared = device_id(DRIVER, "part-1-shared", "shared-gpu-0")
    assert inventory.shared_by_others[shared] == (
        (f"{DRIVER}/memory", 20 * GI),
        (f"{DRIVER}/multiprocessors", 66_000),
    )
    pool = Pool(inventory=inventory, running=(), matcher=DeviceMatcher())
    job = _job("share", "gpu", (("memory", 25 * GI - 5), ("multiprocessors", 1000)))
    shape = placement.Shape.of(job)
    shares = []
    while not isinstance(choice := placement.place(shape, pool), placement.Shortfall):
        (replica,) = placement.as_placement(choice, shape, pool)
        pool.take(replica.node, replica.devices, shape.pod, shares=replica.shares)
        shares.extend(replica.shares)
    # 20Gi + 66 SMs are held by the claim of 10-22: two 25Gi/33 SM shares fit in the 60Gi
    # and 66 SMs left (multiprocessors round up to the validValues 33, 66, 132), not a third
    assert [s.consumed for s in shares] == 2 * [
        ((f"{DRIVER}/memory", 25 * GI), (f"{DRIVER}/multiprocessors", 33_000))
    ]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    """While a driver republishes a pool, the old generation's slices may linger."""
    old = _stored("10-05-resourceslice-devices-consuming-counters-201")
    new = json.loads(json.dumps(old))
    new["metadata"]["name"] = "part-0-devices-2"
    new["spec"]["pool"]["generation"] = 2
    new["spec"]["devices"] = new["spec"]["devices"][:2]
    counters = _stored("10-04-resourceslice-counters-only-201")
    counters["spec"]["pool"]["generation"] = 2
    inventory = build_inventory(slices=[old, new, counters], nodes=[_node("part-0")])
    assert sorted(d.name for d in inventory.devices.values()) == ["gpu-0", "gpu-1"]
    assert len(inventory.counters) == 2
