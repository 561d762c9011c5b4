"""The simulated inventory: GPU nodes in racks, their ResourceSlices and DeviceClasses.

Owns the reference cluster's shape (8 nodes x 8 H100 80GB in 2 racks, 2 NUMA nodes per node,
driver `gpu.nvidia.com`) as plain API objects ready to be created, and the optional nodes whose
GPUs can be split: partitioned nodes publish each GPU whole and as MIG-like partitions that
draw on the GPU's shared counters, shared nodes publish GPUs that several claims may hold at
once (`allowMultipleAllocations`, consumable `capacity`). It must not create them;
`emulator.py` seeds them through the registry like any client would.

Partition profiles follow an H100 80GB's MIG profiles (a documented subset, see
docs/emulator.md); the layout of the slices (a counters-only slice plus device slices in one
pool) is the one the real API server accepts (corpus 10-04/10-05).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import discovery
from gangq.queue.kubesim.validation.slices import (
    MAX_COUNTER_SETS,
    MAX_DEVICES_WITH_TAINTS_OR_COUNTERS,
)

RACK_LABEL = "gangq.dev/rack"
DRIVER = "gpu.nvidia.com"
PRODUCT_NAME = "NVIDIA H100 80GB HBM3"
WHOLE, PARTITIONED, SHARED = "whole", "partitioned", "shared"
TYPE_PARTITION, TYPE_SHARED = "partition", "shared"
"""The `type` attribute of partitions and of shareable GPUs (whole GPUs carry none)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """A partition size: how many fit a GPU and what each takes from the GPU's counters."""

    name: str
    count: int
    compute_slices: int
    memory_slices: int
    memory: str
    multiprocessors: int

    @property
    def device_suffix(self) -> str:
        return self.name.replace(".", "-")


PROFILES = (
    Profile("1g.10gb", 7, 1, 1, "10Gi", 16),
    Profile("2g.20gb", 3, 2, 2, "20Gi", 32),
    Profile("3g.40gb", 2, 3, 4, "40Gi", 60),
    Profile("4g.40gb", 1, 4, 4, "40Gi", 64),
)
"""H100 80GB MIG profiles: 7 compute slices, 8 memory slices, 132 multiprocessors per GPU."""
WHOLE_GPU = Profile("7g.80gb", 1, 7, 8, "80Gi", 132)


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
    partitioned_nodes: int = 0
    """Of `nodes`, how many (after the whole-GPU ones) publish partitionable GPUs."""
    shared_nodes: int = 0
    """Of `nodes`, how many (the last ones) publish GPUs claims can share."""

    def node_name(self, index: int) -> str:
        return f"{self.node_prefix}-{index}"

    def layout(self, index: int) -> str:
        """`whole`, `partitioned` or `shared`: how node `index` publishes its GPUs."""
        if index >= self.nodes - self.shared_nodes:
            return SHARED
        if index >= self.nodes - self.shared_nodes - self.partitioned_nodes:
            return PARTITIONED
        return WHOLE

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


def _attributes(inventory: Inventory, node_name: str, index: int) -> dict[str, Any]:
    numa = index * inventory.numa_per_node // max(inventory.gpus_per_node, 1)
    device_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}/gpu-{index}")
    return {
        "productName": {"string": inventory.product_name},
        "uuid": {"string": f"GPU-{device_uuid}"},
        "numa": {"int": numa},
        "index": {"int": index},
    }


def _device(inventory: Inventory, node_name: str, index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": _attributes(inventory, node_name, index),
        "capacity": {"memory": {"value": inventory.gpu_memory}},
    }


def _counters(profile: Profile) -> dict[str, dict[str, str]]:
    return {
        "memory": {"value": profile.memory},
        "multiprocessors": {"value": str(profile.multiprocessors)},
        "compute-slices": {"value": str(profile.compute_slices)},
        "memory-slices": {"value": str(profile.memory_slices)},
    }


def _partitioned_gpu(inventory: Inventory, node_name: str, index: int) -> list[dict[str, Any]]:
    """The whole GPU and every partition, all drawing on the GPU's counter set."""
    counter_set = f"gpu-{index}-counters"
    whole = _device(inventory, node_name, index)
    whole["consumesCounters"] = [{"counterSet": counter_set, "counters": _counters(WHOLE_GPU)}]
    devices = [whole]
    attributes = _attributes(inventory, node_name, index)
    for profile in PROFILES:
        for number in range(profile.count):
            name = f"gpu-{index}-{profile.device_suffix}-{number}"
            partition_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}/{name}")
            devices.append(
                {
                    "name": name,
                    "attributes": {
                        "type": {"string": TYPE_PARTITION},
                        "profile": {"string": profile.name},
                        "parent": {"string": f"gpu-{index}"},
                        "parentUUID": attributes["uuid"],
                        "productName": attributes["productName"],
                        "uuid": {"string": f"MIG-{partition_uuid}"},
                        "numa": attributes["numa"],
                    },
                    "capacity": {
                        "memory": {"value": profile.memory},
                        "multiprocessors": {"value": str(profile.multiprocessors)},
                    },
                    "consumesCounters": [
                        {"counterSet": counter_set, "counters": _counters(profile)}
                    ],
                }
            )
    return devices


def _shared_gpu(inventory: Inventory, node_name: str, index: int) -> dict[str, Any]:
    """A GPU claims share: each takes memory in 1Gi steps (10Gi unless it asks) and a
    quarter, half or all of the multiprocessors (a quarter unless it asks)."""
    attributes = dict(_attributes(inventory, node_name, index), type={"string": TYPE_SHARED})
    memory = {
        "value": inventory.gpu_memory,
        "requestPolicy": {
            "default": "10Gi",
            "validRange": {"min": "1Gi", "max": inventory.gpu_memory, "step": "1Gi"},
        },
    }
    multiprocessors = {
        "value": str(WHOLE_GPU.multiprocessors),
        "requestPolicy": {"default": "33", "validValues": ["33", "66", "132"]},
    }
    return {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": attributes,
        "capacity": {"memory": memory, "multiprocessors": multiprocessors},
    }


def _slice(
    inventory: Inventory, node_name: str, name: str, count: int, content: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": inventory.driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": count},
            **content,
        },
    }


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def resource_slices(inventory: Inventory, index: int) -> list[dict[str, Any]]:
    """Node `index`'s pool: one slice of whole or shareable GPUs, or, for a partitioned node,
    counters-only slices (8 counter sets each) and device slices (64 devices at most)."""
    node_name = inventory.node_name(index)
    prefix = f"{node_name}-{inventory.driver}"
    gpus = range(inventory.gpus_per_node)
    layout = inventory.layout(index)
    if layout != PARTITIONED:
        build = _shared_gpu if layout == SHARED else _device
        devices = [build(inventory, node_name, gpu) for gpu in gpus]
        return [_slice(inventory, node_name, prefix, 1, {"devices": devices})]
    counter_sets = [
        {"name": f"gpu-{gpu}-counters", "counters": _counters(WHOLE_GPU)} for gpu in gpus
    ]
    per_gpu = [_partitioned_gpu(inventory, node_name, gpu) for gpu in gpus]
    gpus_per_slice = max(1, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS // len(per_gpu[0]))
    counter_chunks = _chunks(counter_sets, MAX_COUNTER_SETS)
    device_chunks = [
        [device for gpu in chunk for device in gpu] for chunk in _chunks(per_gpu, gpus_per_slice)
    ]
    count = len(counter_chunks) + len(device_chunks)
    slices = [
        _slice(inventory, node_name, f"{prefix}-counters-{n}", count, {"sharedCounters": chunk})
        for n, chunk in enumerate(counter_chunks)
    ]
    slices += [
        _slice(inventory, node_name, f"{prefix}-devices-{n}", count, {"devices": chunk})
        for n, chunk in enumerate(device_chunks)
    ]
    return slices


def _class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device_classes(inventory: Inventory) -> list[dict[str, Any]]:
    """The driver's class of whole GPUs, plus one class per kind of split GPU the inventory
    publishes (named `partition.<driver>` and `shared.<driver>`). With split GPUs present the
    whole-GPU class leaves out devices that carry a `type`."""
    driver = inventory.driver
    layouts = {inventory.layout(index) for index in range(inventory.nodes)}
    own = f'device.driver == "{driver}"'
    if layouts == {WHOLE}:
        return [_class(driver, own)]
    attributes = f'device.attributes["{driver}"]'
    classes = [_class(driver, f'{own} && !("type" in {attributes})')]
    for layout, kind in ((PARTITIONED, TYPE_PARTITION), (SHARED, TYPE_SHARED)):
        if layout in layouts:
            classes.append(_class(f"{kind}.{driver}", f'{own} && {attributes}.type == "{kind}"'))
    return classes
