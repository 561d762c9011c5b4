"""Capacity counting: every device in exactly one state, whole-node gangs per scope."""

from __future__ import annotations

from typing import Any

from api_scenario import GPU, node, resource_slice

from gangq.queue.core import capacity, model
from gangq.queue.core import inventory as inventory_builder
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import device_id


def not_ready(raw: dict[str, Any]) -> dict[str, Any]:
    raw["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return raw


def test_each_device_is_counted_in_one_state() -> None:
    tainted = resource_slice("n4", 4)
    tainted["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}
    ]
    maintenance = {"key": "gpu-maintenance", "value": "true", "effect": "NoExecute"}
    nodes = [
        node("n1", "r1"),
        node("n2", "r1"),
        not_ready(node("n3", "r2")),
        node("n4", "r2"),
        node("n5", "r1", taints=[maintenance]),
    ]
    held_claim = {
        "metadata": {"name": "someone-else", "namespace": "x"},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": GPU, "pool": "n2", "device": "gpu-3"}]}
            }
        },
    }
    inventory = inventory_builder.build_inventory(
        slices=[*(resource_slice(n, 4) for n in ("n1", "n2", "n3", "n5")), tainted],
        nodes=nodes,
        claims=[held_claim],
        device_classes=[
            {
                "metadata": {"name": GPU},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
            },
            {
                "metadata": {"name": "numa0.gpu"},
                "spec": {
                    "selectors": [
                        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].numa == 0'}}
                    ]
                },
            },
        ],
        topology_keys=("gangq.dev/rack",),
    )
    # A job tolerating n5's taint holds its gpu-0.
    reserved = frozenset({device_id(GPU, "n2", "gpu-0"), device_id(GPU, "n5", "gpu-0")})
    report = capacity.summarize(inventory, reserved, matcher=DeviceMatcher())
    gpus = report.classes[GPU]
    assert gpus.total == 20
    # n2: gpu-0 reserved, gpu-3 held by a claim gangq did not make; n3 NotReady; n4 gpu-0
    # tainted (the device); n5 tainted (the node): its 3 devices not held are apart.
    assert dict(gpus.by_state) == {
        "free": 9,
        "reserved": 2,
        "held_by_others": 1,
        "unavailable": 5,
        "tainted": 3,
    }
    assert report.tainted_nodes == {"n5": (model.Taint("gpu-maintenance", "true", "NoExecute"),)}
    assert str(report.tainted_nodes["n5"][0]) == "gpu-maintenance=true:NoExecute"
    assert (gpus.whole_node_replicas, gpus.devices_per_node, gpus.largest_gang_devices) == (1, 4, 4)
    assert gpus.largest_replica == 4
    assert report.nodes["n2"][GPU].by_state["free"] == 2
    rack2 = report.domains[("gangq.dev/rack", "r2")][GPU]
    assert (rack2.total, rack2.by_state["free"], rack2.whole_node_replicas) == (8, 3, 0)
    numa0 = report.classes["numa0.gpu"]
    assert (numa0.total, numa0.devices_per_node) == (10, 2)
