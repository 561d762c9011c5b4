"""Inventory and pod requirements from Kubernetes-shaped dicts, and node fit rules."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.core import fit, inventory
from gangq.queue.core.device import DeviceId
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import (
    Node,
    NodeName,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Taint,
    Toleration,
)

GI = 2**30


def _node(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"gangq.dev/rack": "r1"}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(
    name: str, node: str, *, cpu: str, memory: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": "Running"},
    }


SLICE = {
    "metadata": {"name": "gpu-1-slice"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "pool": {"name": "gpu-1"},
        "nodeName": "gpu-1",
        "devices": [
            {"name": "gpu-0", "attributes": {"numa": {"int": 0}}},
            {"name": "gpu-1", "attributes": {"numa": {"int": 1}}},
        ],
    },
}


def _claim(device: str, *, gangq: bool) -> dict[str, Any]:
    labels = {"gangq.dev/job-name": "train"} if gangq else {}
    result = {"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": device, "request": "gpu"}
    return {
        "metadata": {"name": f"claim-{device}", "namespace": "default", "labels": labels},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_inventory_from_cluster_objects() -> None:
    built = inventory.build_inventory(
        slices=[SLICE],
        nodes=[
            _node("gpu-1", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
            _node("cpu-1", unschedulable=True),
        ],
        pods=[
            _pod("web", "gpu-1", cpu="2", memory="4Gi"),
            _pod(
                "train-0", "gpu-1", cpu="8", memory="64Gi", labels={"gangq.dev/job-name": "train"}
            ),
        ],
        claims=[_claim("gpu-0", gangq=False), _claim("gpu-1", gangq=True)],
        device_classes=[
            {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
        ],
        topology_keys=("gangq.dev/rack",),
    )
    gpu_node = built.nodes[NodeName("gpu-1")]
    assert gpu_node.taints == (Taint("gpu", "", "NoSchedule"),)
    assert gpu_node.is_schedulable
    assert not built.nodes[NodeName("cpu-1")].is_schedulable
    assert (gpu_node.allocatable_cpu_milli, gpu_node.allocatable_memory_bytes) == (32_000, 256 * GI)
    # only the pod gangq did not make counts here; the cycle counts gangq gangs itself
    assert (gpu_node.requested_cpu_milli, gpu_node.requested_memory_bytes, gpu_node.pod_count) == (
        2000,
        4 * GI,
        1,
    )
    assert built.held_by_others == frozenset({DeviceId("gpu.nvidia.com/gpu-1/gpu-0")})
    assert built.devices[DeviceId("gpu.nvidia.com/gpu-1/gpu-1")].attributes == {
        "gpu.nvidia.com/numa": 1
    }
    assert built.device_classes["gpu"].selectors == ("true",)
    assert built.topology_keys == ("gangq.dev/rack",)


def test_not_ready_node_is_not_schedulable() -> None:
    raw = _node("gpu-1")
    raw["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert not inventory.node_from_dict(raw).is_schedulable


def test_pod_requirements_from_template() -> None:
    template = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "1Mi"}}}],
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"pool": "h100", "arch": "amd64"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                }
            },
        }
    }
    assert inventory.pod_requirements(template) == PodRequirements(
        cpu_milli=4000,
        memory_bytes=2 * GI,
        tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"),),
        node_selector=(("arch", "amd64"), ("pool", "h100")),
        required_node_affinity=(
            NodeSelectorTerm((NodeSelectorRequirement("zone", "In", ("a",)),)),
        ),
    )


@pytest.mark.parametrize(
    ("build", "raw", "fragment"),
    [
        pytest.param(
            inventory.node_from_dict,
            {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "lots"}}},
            "Node n: cpu",
            id="node-cpu",
        ),
        pytest.param(
            inventory.pod_requirements,
            {"spec": {"containers": [{"resources": {"requests": {"memory": "1Zi"}}}]}},
            "memory request",
            id="pod-memory",
        ),
        pytest.param(
            inventory.claim_devices,
            {
                "metadata": {"name": "c", "namespace": "ns"},
                "status": {"allocation": {"devices": {"results": [{"driver": "gpu"}]}}},
            },
            "ResourceClaim ns/c",
            id="claim-result",
        ),
        pytest.param(
            inventory.device_class_from_dict,
            {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {}}]}},
            "DeviceClass gpu",
            id="class-selector",
        ),
    ],
)
def test_malformed_objects_name_what_to_fix(build: Any, raw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        build(raw)


LABELS = {"zone": "a", "gpus": "8"}


@pytest.mark.parametrize(
    ("requirement", "holds"),
    [
        (NodeSelectorRequirement("zone", "In", ("a", "b")), True),
        (NodeSelectorRequirement("zone", "In", ("b",)), False),
        (NodeSelectorRequirement("zone", "NotIn", ("b",)), True),
        (NodeSelectorRequirement("zone", "Exists"), True),
        (NodeSelectorRequirement("rack", "Exists"), False),
        (NodeSelectorRequirement("rack", "DoesNotExist"), True),
        (NodeSelectorRequirement("gpus", "Gt", ("4",)), True),
        (NodeSelectorRequirement("gpus", "Lt", ("4",)), False),
    ],
    ids=lambda value: value.operator if isinstance(value, NodeSelectorRequirement) else str(value),
)
def test_required_node_affinity_operators(
    requirement: NodeSelectorRequirement, holds: bool
) -> None:
    node = Node(name=NodeName("n"), labels=LABELS)
    pod = PodRequirements(required_node_affinity=(NodeSelectorTerm((requirement,)),))
    assert fit.is_accepted(node, pod) is holds


@pytest.mark.parametrize(
    ("taint", "toleration", "tolerated"),
    [
        (Taint("gpu", "x", "NoSchedule"), Toleration("gpu", "Equal", "x"), True),
        (Taint("gpu", "x", "NoSchedule"), Toleration("gpu", "Equal", "y"), False),
        (Taint("gpu", "x", "NoExecute"), Toleration("gpu", "Exists", effect="NoSchedule"), False),
        (Taint("gpu", "x", "NoExecute"), Toleration("", "Exists"), True),
        (Taint("gpu", "x", "PreferNoSchedule"), None, True),
    ],
)
def test_taints_and_tolerations(
    taint: Taint, toleration: Toleration | None, tolerated: bool
) -> None:
    tolerations = (toleration,) if toleration else ()
    assert fit.is_tolerated((taint,), tolerations) is tolerated
