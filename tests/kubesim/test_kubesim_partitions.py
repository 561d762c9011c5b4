"""Partitionable and shareable GPUs: what `cluster up --partitioned-nodes/--shared-nodes`
publishes, how the emulator's scheduler counts counters and capacity, and device taints."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from gangq.queue.core import quantity
from gangq.queue.kubesim import cluster as fleet
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

SPLIT = fleet.Inventory(nodes=2, gpus_per_node=2, racks=1, partitioned_nodes=1, shared_nodes=1)
"""gpu-0 publishes 2 partitionable GPUs, gpu-1 2 shareable ones."""
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"
DRIVER = fleet.DRIVER


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator(inventory=SPLIT) as emulator:
        yield emulator


def _claim(name: str, device_class: str, *selectors: str, **exactly: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": 1,
        **exactly,
    }
    if selectors:
        request["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def _profile(name: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{name}"'


async def _run(http: Http, name: str, body: dict[str, Any]) -> None:
    code, reply, _ = await http.request("POST", CLAIMS, body)
    assert code == 201, reply
    code, reply, _ = await http.request("POST", PODS, pod(f"p-{name}", claims=(name,)))
    assert code == 201, reply


def _stored(cluster: Emulator, kind: kinds.ResourceType, name: str) -> dict[str, Any] | None:
    return cluster.registry.storage.get(kind.store_key, "default", name)


def _results(cluster: Emulator, name: str) -> list[dict[str, Any]]:
    found = _stored(cluster, kinds.RESOURCE_CLAIMS, name) or {}
    allocation = (found.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def _settled(cluster: Emulator, names: list[str]) -> bool:
    """Every pod bound or given a scheduler reason."""
    return all(
        f"default/p-{n}" in cluster.scheduler.reasons
        or ((_stored(cluster, kinds.PODS, f"p-{n}") or {}).get("spec") or {}).get("nodeName")
        for n in names
    )


def _parents(cluster: Emulator) -> dict[str, str]:
    """Published device name -> the GPU whose counters it draws on."""
    parents = {}
    for resource_slice in cluster.registry.storage.items(kinds.RESOURCE_SLICES.key):
        for device in resource_slice["spec"].get("devices") or []:
            for entry in device.get("consumesCounters") or []:
                parents[device["name"]] = entry["counterSet"].removesuffix("-counters")
    return parents


async def test_published_pools_pass_validation_and_reference_their_counter_sets() -> None:
    inventory = fleet.Inventory(nodes=3, gpus_per_node=16, partitioned_nodes=1, shared_nodes=1)
    async with Emulator(inventory=inventory) as emulator:
        slices = list(emulator.registry.storage.items(kinds.RESOURCE_SLICES.key))
        classes = sorted(
            c["metadata"]["name"] for c in emulator.registry.storage.items(kinds.DEVICE_CLASSES.key)
        )
    assert classes == [DRIVER, f"partition.{DRIVER}", f"shared.{DRIVER}"]
    pool = [s for s in slices if s["spec"]["pool"]["name"] == "gpu-1"]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in pool} == {len(pool)}
    counter_sets = {c["name"] for s in pool for c in s["spec"].get("sharedCounters") or []}
    devices = [d for s in pool for d in s["spec"].get("devices") or []]
    assert len(counter_sets) == 16 and len(devices) == 16 * 14
    assert all(len(s["spec"].get("devices") or []) <= 64 for s in pool)
    assert {e["counterSet"] for d in devices for e in d["consumesCounters"]} == counter_sets
    shared = next(s for s in slices if s["spec"]["pool"]["name"] == "gpu-2")["spec"]["devices"]
    assert all(d["allowMultipleAllocations"] for d in shared)
    plain = next(s for s in slices if s["spec"]["pool"]["name"] == "gpu-0")["spec"]["devices"]
    assert all("type" not in d["attributes"] for d in plain)


async def test_partitions_are_allocated_until_their_gpu_counters_run_out(
    cluster: Emulator, http: Http
) -> None:
    names = [f"half-{n}" for n in range(5)]
    for name in names:
        await _run(http, name, _claim(name, f"partition.{DRIVER}", _profile("3g.40gb")))
    await wait_until(lambda: _settled(cluster, names))
    allocated = [n for n in names if _results(cluster, n)]
    assert len(allocated) == 4
    by_gpu: dict[str, int] = {}
    parents = _parents(cluster)
    for name in allocated:
        device = _results(cluster, name)[0]["device"]
        by_gpu[parents[device]] = by_gpu.get(parents[device], 0) + 1
    assert by_gpu == {"gpu-0": 2, "gpu-1": 2}
    waiting = next(n for n in names if n not in allocated)
    assert cluster.scheduler.reasons[f"default/p-{waiting}"] == (
        "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    # Two 3g.40gb take all 8 memory slices of a GPU: not even a 1g.10gb fits beside them.
    await _run(http, "small", _claim("small", f"partition.{DRIVER}", _profile("1g.10gb")))
    reason = await wait_until(lambda: cluster.scheduler.reasons.get("default/p-small"))
    assert "cannot allocate all claims" in reason


async def test_an_allocation_the_scheduler_did_not_make_still_uses_up_its_gpu(
    cluster: Emulator, http: Http
) -> None:
    """Corpus 10-38: externally allocated whole GPUs count against their partitions."""
    code, _, _ = await http.request("POST", CLAIMS, _claim("whole", DRIVER))
    assert code == 201
    selector = {"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": "gpu-0", "device": "gpu-0"}]
        },
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        "allocationTimestamp": "2026-12-01T14:05:41Z",
    }
    code, body, _ = await http.request(
        "PATCH",
        f"{CLAIMS}/whole/status",
        {"status": {"allocation": allocation}},
        content_type=MERGE,
    )
    assert code == 200, body
    on_gpu_0 = f'device.attributes["{DRIVER}"].parent == "gpu-0"'
    on_gpu_1 = f'device.attributes["{DRIVER}"].parent == "gpu-1"'
    await _run(http, "blocked", _claim("blocked", f"partition.{DRIVER}", on_gpu_0))
    await _run(http, "free", _claim("free", f"partition.{DRIVER}", on_gpu_1))
    await wait_until(lambda: _settled(cluster, ["blocked", "free"]))
    assert not _results(cluster, "blocked")
    assert _results(cluster, "free")[0]["device"].startswith("gpu-1-")
    pending = _stored(cluster, kinds.PODS, "p-blocked") or {}
    condition = pending["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    assert condition["message"].startswith("0/2 nodes are available: 2 cannot allocate all claims.")


async def test_shares_are_rounded_to_the_request_policy_and_never_exceed_capacity(
    cluster: Emulator, http: Http
) -> None:
    names = [f"share-{n}" for n in range(5)]
    for name in names:
        requests = {"memory": "29.5Gi", "multiprocessors": "40"}
        await _run(http, name, _claim(name, f"shared.{DRIVER}", capacity={"requests": requests}))
    await wait_until(lambda: _settled(cluster, names))
    results = [r for n in names for r in _results(cluster, n)]
    # 30Gi (1Gi steps) and 66 multiprocessors (valid values 33/66/132): two shares per GPU.
    assert len(results) == 4
    assert {r["device"] for r in results} == {"gpu-0", "gpu-1"}
    for result in results:
        assert result["consumedCapacity"] == {"memory": "30Gi", "multiprocessors": "66"}
        assert str(uuid.UUID(result["shareID"])) == result["shareID"]
    for device in ("gpu-0", "gpu-1"):
        taken = [r for r in results if r["device"] == device]
        memory = sum(quantity.parse_milli(r["consumedCapacity"]["memory"]) for r in taken)
        assert memory <= quantity.parse_milli("80Gi")


async def test_a_tainted_device_is_allocated_only_when_tolerated_and_keeps_the_tolerations(
    cluster: Emulator, http: Http
) -> None:
    for device in ("gpu-0", "gpu-1"):
        cluster.kubelets.taint_device("gpu-1", device, effect="NoSchedule", key="example.com/ecc")
    await _run(http, "plain", _claim("plain", f"shared.{DRIVER}"))
    toleration = {"key": "example.com/ecc", "operator": "Exists", "effect": "NoSchedule"}
    body = _claim("tolerant", f"shared.{DRIVER}", tolerations=[toleration])
    await _run(http, "tolerant", body)
    await wait_until(lambda: _settled(cluster, ["plain", "tolerant"]))
    assert not _results(cluster, "plain")
    assert _results(cluster, "tolerant")[0]["tolerations"] == [toleration]


async def test_no_execute_taint_evicts_at_once_or_after_the_toleration_seconds(
    cluster: Emulator, http: Http
) -> None:
    toleration = {
        "key": "example.com/unhealthy",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 600,
    }
    await _run(http, "bare", _claim("bare", f"shared.{DRIVER}", _device_is("gpu-0")))
    body = _claim("patient", f"shared.{DRIVER}", _device_is("gpu-1"), tolerations=[toleration])
    await _run(http, "patient", body)
    await wait_until(lambda: _reserved(cluster, "bare") and _reserved(cluster, "patient"))
    for device in ("gpu-0", "gpu-1"):
        cluster.kubelets.taint_device("gpu-1", device, key="example.com/unhealthy")
    await wait_until(lambda: _stored(cluster, kinds.PODS, "p-bare") is None)
    await wait_until(lambda: not _reserved(cluster, "bare"))
    # The scheduler allocated it (delete-protection finalizer): released with its pod (5-42);
    # a pre-allocated claim keeps its allocation (corpus 10-37, tests/contract).
    assert not _results(cluster, "bare")
    events = cluster.registry.storage.items(kinds.EVENTS.key, "default")
    evictions = [e for e in events if e["reason"] == "DeviceTaintManagerEviction"]
    assert [e["involvedObject"]["name"] for e in evictions] == ["p-bare"]
    assert _stored(cluster, kinds.PODS, "p-patient") is not None
    later = cluster.registry.clock() + timedelta(seconds=601)
    cluster.registry.clock = lambda: later
    cluster.kubelets.taint_device("gpu-1", "gpu-0", key="example.com/other")
    await wait_until(lambda: _stored(cluster, kinds.PODS, "p-patient") is None)


def _device_is(name: str) -> str:
    return f'device.attributes["{DRIVER}"].index == {name.removeprefix("gpu-")}'


def _reserved(cluster: Emulator, name: str) -> bool:
    found = _stored(cluster, kinds.RESOURCE_CLAIMS, name) or {}
    return bool((found.get("status") or {}).get("reservedFor"))
