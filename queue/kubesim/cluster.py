"""The simulated inventory: GPU nodes in racks, their ResourceSlices and the DeviceClass.

Owns the reference cluster's shape (8 nodes x 8 H100 80GB in 2 racks, 2 NUMA nodes per node,
driver `gpu.nvidia.com`) as plain API objects ready to be created. It must not create them;
`emulator.py` seeds them through the registry like any client would.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import discovery

RACK_LABEL = "gangq.dev/rack"
DRIVER = "gpu.nvidia.com"
PRODUCT_NAME = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: int = 8
    gpus_per_node: int = 8
    racks: int = 2
    numa_per_node: int = 2
    driver: str = DRIVER
    product_name: str = PRODUCT_NAME
    gpu_memory: str = "80Gi"
    node_cpu: str = "128"
    node_memory: str = "2Ti"
    node_pods: str = "110"
    node_prefix: str = "gpu"

    def node_name(self, index: int) -> str:
        return f"{self.node_prefix}-{index}"

    def rack(self, index: int) -> str:
        per_rack = max(1, -(-self.nodes // max(self.racks, 1)))
        return f"rack-{index // per_rack}"


def node(inventory: Inventory, index: int) -> dict[str, Any]:
    name = inventory.node_name(index)
    resources = {
        "cpu": inventory.node_cpu,
        "memory": inventory.node_memory,
        "pods": inventory.node_pods,
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                RACK_LABEL: inventory.rack(index),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": discovery.VERSION["gitVersion"],
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "kubesim",
                "containerRuntimeVersion": "kubesim://1",
            },
        },
    }


def _device(inventory: Inventory, node_name: str, index: int) -> dict[str, Any]:
    numa = index * inventory.numa_per_node // max(inventory.gpus_per_node, 1)
    device_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}/gpu-{index}")
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "productName": {"string": inventory.product_name},
            "uuid": {"string": f"GPU-{device_uuid}"},
            "numa": {"int": numa},
            "index": {"int": index},
        },
        "capacity": {"memory": {"value": inventory.gpu_memory}},
    }


def resource_slice(inventory: Inventory, index: int) -> dict[str, Any]:
    node_name = inventory.node_name(index)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{inventory.driver}"},
        "spec": {
            "driver": inventory.driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                _device(inventory, node_name, gpu) for gpu in range(inventory.gpus_per_node)
            ],
        },
    }


def device_class(inventory: Inventory) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": inventory.driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{inventory.driver}"'}}]},
    }
