"""Corpus section 10: partitionable devices, consumable capacity, device taints and
prioritized lists, as the real server stores and validates them (namespace ref10, nodes
part-0 and part-1, driver part.example.com)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .conftest import Case, Replay, load, run

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


def _until(path: str, check: Callable[[Any], bool]) -> Callable[[Replay], Awaitable[Any]]:
    async def wait(reference: Replay) -> None:
        for _ in range(500):
            reply = await reference.call("GET", path)
            if check(reply):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{path} never reached the expected state")

    return wait


CLUSTER = (_namespace, "10-01", _second_node, "10-02")
POOLS = (*CLUSTER, "10-04", "10-05", "10-13", "10-17")
ALLOCATION = ("status.allocation.devices", "status.allocation.nodeSelector")
MIG0 = (*POOLS, _claim("mig0", "10-33"), "10-29")
SCHEDULED = (
    *MIG0,
    "10-31",
    _until(f"{CLAIMS}/mig0", lambda r: bool((r.body.get("status") or {}).get("reservedFor"))),
)

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
