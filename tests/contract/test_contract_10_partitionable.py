"""Corpus section 10: partitionable devices, consumable capacity, device taints and
prioritized lists, as the real server stores and validates them (namespace ref10, nodes
part-0 and part-1, driver part.example.com)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .conftest import Case, Replay, load, run, until

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ref10/resourceclaims"
PODS = "/api/v1/namespaces/ref10/pods"


async def _namespace(reference: Replay) -> None:
    reply = await reference.call("POST", "/api/v1/namespaces", {"metadata": {"name": "ref10"}})
    assert reply.status == 201, reply.body


async def _second_node(reference: Replay) -> None:
    body = copy.deepcopy(load("10-01")["request"]["body"])
    body["metadata"]["name"] = "part-1"
    body["metadata"]["labels"]["kubernetes.io/hostname"] = "part-1"
    reply = await reference.call("POST", "/api/v1/nodes", body)
    assert reply.status == 201, reply.body


def _claim(name: str, source: str) -> Callable[[Replay], Awaitable[Any]]:
    """A claim `name` with the spec a captured case created or showed."""

    async def create(reference: Replay) -> None:
        case = load(source)
        shown = (
            case["request"]["body"]
            if case["request"]["method"] == "POST"
            else case["response"]["body"]
        )
        body = {"metadata": {"name": name}, "spec": copy.deepcopy(shown["spec"])}
        reply = await reference.call("POST", CLAIMS, body)
        assert reply.status == 201, reply.body

    return create


CLUSTER = (_namespace, "10-01", _second_node, "10-02")
POOLS = (*CLUSTER, "10-04", "10-05", "10-13", "10-17")
ALLOCATION = ("status.allocation.devices", "status.allocation.nodeSelector")
MIG0 = (*POOLS, _claim("mig0", "10-33"), "10-29")
SCHEDULED = (
    *MIG0,
    "10-31",
    until(f"{CLAIMS}/mig0", lambda r: bool((r.body.get("status") or {}).get("reservedFor"))),
)


def _allocate(
    claim: str, pool: str, device: str, node: str, **extra: Any
) -> Callable[[Replay], Awaitable[Any]]:
    """Write an allocation into the claim's status, as the captured run's test did."""

    async def write(reference: Replay) -> None:
        result = {"request": "gpu", "driver": "part.example.com", "pool": pool, "device": device}
        selector = {"key": "metadata.name", "operator": "In", "values": [node]}
        allocation = {
            "devices": {"results": [dict(result, **extra)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
            "allocationTimestamp": "2026-12-01T14:05:41Z",
        }
        reply = await reference.call(
            "PATCH",
            f"{CLAIMS}/{claim}/status",
            {"status": {"allocation": allocation}},
            content_type="application/merge-patch+json",
        )
        assert reply.status == 200, reply.body

    return write


def _pod(
    name: str, claim: str, node: str, app: str = "ref10"
) -> Callable[[Replay], Awaitable[Any]]:
    """A pod like 10-31's for another claim and node."""

    async def create(reference: Replay) -> None:
        body = copy.deepcopy(load("10-31")["request"]["body"])
        body["metadata"] = {"name": name, "labels": {"app": app}}
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        body["spec"]["resourceClaims"][0]["resourceClaimName"] = claim
        reply = await reference.call("POST", PODS, body)
        assert reply.status == 201, reply.body

    return create


async def _settled(reference: Replay) -> None:
    """Every ref10 pod Running and p-notol evicted."""
    for _ in range(500):
        items = (await reference.call("GET", PODS, query={"labelSelector": "app=ref10"})).body[
            "items"
        ]
        names = {p["metadata"]["name"] for p in items}
        if "p-notol" not in names and all(p["status"].get("phase") == "Running" for p in items):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the ref10 pods never settled")


async def _notol_released(reference: Replay) -> None:
    await until(f"{CLAIMS}/notol", lambda r: not (r.body.get("status") or {}).get("reservedFor"))(
        reference
    )


SHARE = "2c7a7d56-de87-42b7-9bc9-52f9fb94db9"
OVERLAPS = (
    *MIG0,
    _claim("whole0", "10-33"),
    _allocate("whole0", "part-0", "gpu-0", "part-0"),
    _claim("fa-2", "10-25"),
    "10-28",
    _claim("dupa", "10-33"),
    _allocate("dupa", "part-0", "gpu-1", "part-0"),
    _claim("dupb", "10-33"),
    _allocate("dupb", "part-0", "gpu-1", "part-0"),
    "10-21",
    "10-22",
    _claim("cap-b", "10-21"),
    "10-24",
    *(
        step
        for index, name in enumerate(("cap-c", "cap-d"))
        for step in (
            _claim(name, "10-21"),
            _allocate(
                name,
                "part-1-shared",
                "shared-gpu-0",
                "part-1",
                shareID=f"{SHARE}{index + 7}",
                consumedCapacity={"memory": "60Gi", "multiprocessors": "66"},
            ),
        )
    ),
    "10-19",
    "10-30",
    _claim("notol", "10-37"),
    _allocate("notol", "part-1-taints", "tainted-gpu-1", "part-1"),
    "10-31",
    *(
        _pod(f"p-{claim}".replace("p-fa-2", "p-fa2"), claim, node)
        for claim, node in (
            ("whole0", "part-0"),
            ("fa-2", "part-0"),
            ("dupa", "part-0"),
            ("dupb", "part-0"),
            ("cap-a", "part-1"),
            ("cap-b", "part-1"),
            ("cap-c", "part-1"),
            ("cap-d", "part-1"),
            ("tol", "part-1"),
            ("notol", "part-1"),
        )
    ),
    _settled,
    _notol_released,
)
SCHED_MIG = {
    "devices": {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": "part.example.com",
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "selectors": [
                        {
                            "cel": {
                                "expression": 'device.attributes["part.example.com"].type'
                                ' == "mig-3g.40gb"'
                            }
                        }
                    ],
                },
            }
        ]
    }
}


async def _sched_mig(reference: Replay) -> None:
    """10-38: a claim kube-scheduler must allocate itself, and its pod on part-0."""
    body = {"metadata": {"name": "sched-mig"}, "spec": SCHED_MIG}
    reply = await reference.call("POST", CLAIMS, body)
    assert reply.status == 201, reply.body
    await _pod("p-sched-mig", "sched-mig", "part-0", app="ref10-sched")(reference)

    def unschedulable(r: Any) -> bool:
        conditions = (r.body.get("status") or {}).get("conditions") or []
        return any(c.get("reason") == "Unschedulable" for c in conditions)

    await until(f"{PODS}/p-sched-mig", unschedulable)(reference)


SECTION_10 = [
    Case("10-01", setup=(_namespace,), paths=("spec", "status.nodeInfo", "status.daemonEndpoints")),
    Case("10-02", paths=("spec",)),
    Case("10-03", setup=CLUSTER),
    Case("10-04", setup=CLUSTER, paths=("spec",)),
    Case("10-05", setup=(*CLUSTER, "10-04"), paths=("spec",)),
    Case("10-06", setup=CLUSTER, paths=("spec",)),
    Case("10-07", setup=CLUSTER),
    Case("10-08", setup=CLUSTER),
    Case("10-09", setup=CLUSTER),
    Case("10-10", setup=CLUSTER),
    Case("10-11", setup=CLUSTER),
    Case("10-12", setup=(*CLUSTER, "10-04", "10-05"), paths=("spec",)),
    Case("10-13", setup=CLUSTER, paths=("spec",)),
    Case("10-14", setup=CLUSTER),
    Case("10-15", setup=CLUSTER),
    Case("10-16", setup=CLUSTER),
    Case(
        "10-17",
        setup=CLUSTER,
        paths=("spec.devices.1", "spec.devices.0.taints.0.effect", "spec.devices.2.taints.0.key"),
    ),
    Case("10-18", setup=CLUSTER),
    Case("10-19", setup=CLUSTER, paths=("spec", "status")),
    Case("10-20", setup=CLUSTER),
    Case("10-21", setup=CLUSTER, paths=("spec", "status")),
    Case("10-22", setup=(*POOLS, "10-21"), paths=ALLOCATION),
    Case("10-23", setup=(*POOLS, _claim("cap-b", "10-21"))),
    Case("10-24", setup=(*POOLS, _claim("cap-b", "10-21")), paths=ALLOCATION),
    Case("10-25", setup=CLUSTER, paths=("spec", "status")),
    Case("10-26", setup=(*POOLS, "10-25"), paths=ALLOCATION),
    Case("10-27", setup=(*POOLS, _claim("fa-2", "10-25"))),
    Case("10-28", setup=(*POOLS, _claim("fa-2", "10-25")), paths=ALLOCATION),
    Case("10-29", setup=(*POOLS, _claim("mig0", "10-33")), paths=ALLOCATION),
    Case("10-30", setup=(*POOLS, "10-19"), paths=ALLOCATION),
    Case("10-31", setup=MIG0, paths=("spec.nodeSelector", "spec.resourceClaims")),
    Case("10-32", setup=SCHEDULED, paths=("spec.nodeName", "spec.resourceClaims")),
    Case(
        "10-33",
        setup=SCHEDULED,
        paths=(*ALLOCATION, "status.reservedFor.0.name", "status.reservedFor.0.resource"),
    ),
    Case("10-36", setup=OVERLAPS),
    Case("10-37", setup=OVERLAPS, paths=(*ALLOCATION, "status.reservedFor")),
    Case("10-39", setup=CLUSTER, paths=("status",)),
    Case("10-40", setup=POOLS, names=True),
]


@pytest.mark.parametrize("case", SECTION_10, ids=str)
async def test_section_10_partitionable_devices(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_10_taints_get_their_time_added(reference: Replay) -> None:
    """10-17: a taint without timeAdded gets the create time; a given one is kept."""
    for step in CLUSTER:
        await (reference.replay(step) if isinstance(step, str) else step(reference))
    reply = await reference.replay("10-17")
    devices = reply.body["spec"]["devices"]
    assert devices[0]["taints"][0]["timeAdded"].endswith("Z")
    assert devices[1]["taints"][0]["timeAdded"] == "2026-12-01T14:00:00Z"


async def test_section_10_pre_allocated_overlaps_all_run_on_their_nodes(
    reference: Replay,
) -> None:
    """10-34: kube-scheduler does not refuse overlapping external allocations."""
    reply = await run(reference, Case("10-34", setup=OVERLAPS, names=True))
    expected = load("10-34")["response"]["body"]["items"]

    def placed(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(p["metadata"]["name"], p["spec"]["nodeName"], p["status"]["phase"]) for p in items]

    assert placed(reply.body["items"]) == placed(expected)


async def test_section_10_scheduled_and_device_taint_eviction_events(reference: Replay) -> None:
    """10-35: one Scheduled event per pod from the scheduler, and DeviceTaintManagerEviction
    for p-notol from the device taint eviction controller."""
    reply = await run(reference, Case("10-35", setup=OVERLAPS))
    fields = (
        "reason",
        "message",
        "source",
        "type",
        "count",
        "action",
        "reportingComponent",
    )

    def shown(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (
                e["involvedObject"]["name"],
                sorted(e["involvedObject"]),
                *(e.get(f) for f in fields),
                e.get("eventTime") is None,
                e.get("firstTimestamp") is None,
            )
            for e in items
        )

    expected = shown(load("10-35")["response"]["body"]["items"])
    assert [e[2] for e in expected].count("DeviceTaintManagerEviction") == 1
    assert shown(reply.body["items"]) == expected
    eviction = next(e for e in reply.body["items"] if e["reason"] == "DeviceTaintManagerEviction")
    assert eviction["reportingInstance"] == ""


async def test_section_10_scheduler_counts_allocations_it_did_not_make(
    reference: Replay,
) -> None:
    """10-38: the Unschedulable message, for this cluster's 4 nodes instead of the capture's 10."""
    paths = ("spec.nodeName", "status.phase", "status.conditions.0.observedGeneration")
    condition = tuple(f"status.conditions.0.{key}" for key in ("type", "status", "reason"))
    reply = await run(
        reference, Case("10-38", setup=(*OVERLAPS, _sched_mig), paths=(*paths, *condition))
    )
    expected = load("10-38")["response"]["body"]["status"]["conditions"][0]["message"]
    nodes = len((await reference.call("GET", "/api/v1/nodes")).body["items"])
    assert nodes == 4
    expected = (
        expected.replace("0/10", f"0/{nodes}")
        .replace("9 node(s)", f"{nodes - 1} node(s)")
        .replace("10 Preemption", f"{nodes} Preemption")
    )
    assert reply.body["status"]["conditions"][0]["message"] == expected
