"""Gang scheduling in the emulator (`Emulator(podgroups=True)`): the pod-group cycle binds a
gang all at once or not at all, a gang that cannot fit is retried without writes and counted,
the resources are authorized like any other, and with the gates off nothing of it exists."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gangq.queue.kubesim import authorization
from gangq.queue.kubesim.emulator import Emulator

from .conftest import SMALL, Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"
GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
GATE = "gangq.dev/admission"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
async def gangs() -> AsyncIterator[Emulator]:
    async with Emulator(inventory=SMALL, podgroups=True) as emulator:
        yield emulator


@pytest.fixture
async def gang_http(gangs: Emulator) -> AsyncIterator[Http]:
    headers = {"Authorization": f"Bearer {gangs.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        yield Http(session, gangs.base_url)


def _group(name: str, min_count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _member(name: str, group: str, **spec: Any) -> dict[str, Any]:
    return pod(name, gates=(GATE,), schedulingGroup={"podGroupName": group}, **spec)


async def test_a_list_never_shows_a_gang_partly_bound(gangs: Emulator, gang_http: Http) -> None:
    shuffled = random.Random(7)
    sizes = {f"g{n}": shuffled.randint(2, 4) for n in range(24)}
    for group, size in sizes.items():
        assert (await gang_http.request("POST", GROUPS, _group(group, size)))[0] == 201
        for index in range(size):
            code, _, _ = await gang_http.request("POST", PODS, _member(f"{group}-{index}", group))
            assert code == 201
    releases = [f"{group}-{i}" for group, size in sizes.items() for i in range(size)]
    shuffled.shuffle(releases)
    snapshots: list[dict[str, int]] = []
    done = asyncio.Event()

    async def watch_lists() -> None:
        while not done.is_set():
            _, listed, _ = await gang_http.request("GET", PODS)
            bound: dict[str, int] = {}
            for item in listed["items"]:
                group = item["spec"]["schedulingGroup"]["podGroupName"]
                bound[group] = bound.get(group, 0) + bool(item["spec"].get("nodeName"))
            snapshots.append(bound)
            if all(bound.get(group) == size for group, size in sizes.items()):
                done.set()

    async def release(name: str) -> None:
        await asyncio.sleep(shuffled.random() / 2)
        patch = [{"op": "remove", "path": "/spec/schedulingGates"}]
        code, _, _ = await gang_http.request(
            "PATCH", f"{PODS}/{name}", patch, content_type=JSON_PATCH
        )
        assert code == 200

    lister = asyncio.create_task(watch_lists())
    await asyncio.gather(*(release(name) for name in releases))
    await asyncio.wait_for(lister, 10)
    mixed = [b for b in snapshots if 0 < sum(1 for g in sizes if b.get(g)) < len(sizes)]
    assert len(mixed) > 5, "lists were taken while the gangs were being released"
    for bound in snapshots:
        assert all(bound.get(group, 0) in (0, size) for group, size in sizes.items()), bound
    assert set(gangs.scheduler.gang_cycles) == {f"default/{group}" for group in sizes}


async def test_an_unschedulable_gang_is_retried_without_writes_until_its_pods_go(
    gangs: Emulator, gang_http: Http
) -> None:
    await gang_http.request("POST", GROUPS, _group("huge", 2))
    big = {"requests": {"cpu": "100"}}
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "gpu-0"}}
    for name in ("huge-0", "huge-1"):
        body = pod(name, schedulingGroup={"podGroupName": "huge"}, **pinned)
        body["spec"]["containers"][0]["resources"] = big
        await gang_http.request("POST", PODS, body)
    storage = gangs.registry.storage
    await wait_until(lambda: len(gangs.scheduler.reasons) == 2)
    await asyncio.sleep(0.05)
    version = storage.resource_version
    cycles = gangs.scheduler.gang_cycles["default/huge"]
    await asyncio.sleep(0.2)
    assert gangs.scheduler.gang_cycles["default/huge"] >= cycles + 20
    assert storage.resource_version == version, "a retry that changes nothing writes nothing"
    for name in ("huge-0", "huge-1"):
        await gang_http.request("DELETE", f"{PODS}/{name}")
    await asyncio.sleep(0.05)
    stopped = gangs.scheduler.gang_cycles["default/huge"]
    await asyncio.sleep(0.1)
    assert gangs.scheduler.gang_cycles["default/huge"] == stopped


async def test_a_gang_member_that_does_not_fit_keeps_the_others_off_their_nodes(
    gangs: Emulator, gang_http: Http
) -> None:
    """Tentative placements count: two pods that each fit a node alone do not fit together."""
    await gang_http.request("POST", GROUPS, _group("pair", 2))
    for name in ("pair-0", "pair-1"):
        body = pod(name, schedulingGroup={"podGroupName": "pair"})
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-1"}
        await gang_http.request("POST", PODS, body)
    await wait_until(lambda: len(gangs.scheduler.reasons) == 2)
    reasons = sorted(gangs.scheduler.reasons.values())
    assert reasons[0].startswith("0/2 nodes are available: 1 node(s) didn't have free ports")
    assert "waiting for minCount pods" in reasons[1]
    _, listed, _ = await gang_http.request("GET", PODS)
    assert not any(item["spec"].get("nodeName") for item in listed["items"])


async def test_podgroups_are_authorized_like_any_resource(gangs: Emulator, gang_http: Http) -> None:
    token = gangs.service_account_token("default", "worker")
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        worker = Http(session, gangs.base_url)
        code, body, _ = await worker.request("POST", GROUPS, _group("g", 2))
        assert (code, body["message"]) == (
            403,
            'podgroups.scheduling.k8s.io is forbidden: User "system:serviceaccount:default:'
            'worker" cannot create resource "podgroups" in API group "scheduling.k8s.io" in '
            'the namespace "default"',
        )
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "groups", "namespace": "default"},
            "rules": [
                {
                    "apiGroups": ["scheduling.k8s.io"],
                    "resources": ["podgroups"],
                    "verbs": ["create", "get", "patch"],
                }
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "groups", "namespace": "default"},
            "roleRef": {"apiGroup": authorization.RBAC_GROUP, "kind": "Role", "name": "groups"},
            "subjects": [{"kind": "ServiceAccount", "name": "worker"}],
        }
        gangs.apply([role, binding])
        assert (await worker.request("POST", GROUPS, _group("g", 2)))[0] == 201
        status = {"status": {"conditions": []}}
        code, _, _ = await worker.request(
            "PATCH", f"{GROUPS}/g/status", status, content_type="application/merge-patch+json"
        )
        assert code == 403, "podgroups/status is a resource of its own"


async def test_discovery_and_openapi_serve_the_alpha_group(gang_http: Http) -> None:
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    _, body, _ = await gang_http.request("GET", "/apis", headers={"Accept": aggregated})
    group = next(item for item in body["items"] if item["metadata"]["name"] == "scheduling.k8s.io")
    resources = {r["resource"]: r for r in group["versions"][0]["resources"]}
    assert group["versions"][0]["version"] == "v1alpha2"
    assert [s["subresource"] for s in resources["podgroups"]["subresources"]] == ["status"]
    assert "subresources" not in resources["workloads"]
    _, index, _ = await gang_http.request("GET", "/openapi/v3")
    assert "apis/scheduling.k8s.io/v1alpha2" in index["paths"]


async def test_with_the_gates_off_nothing_of_it_is_served(cluster: Emulator, http: Http) -> None:
    code, body, _ = await http.request("GET", "/apis/scheduling.k8s.io/v1alpha2")
    assert (code, body) == (404, "404 page not found\n")
    _, groups, _ = await http.request("GET", "/apis")
    assert "scheduling.k8s.io" not in [g["name"] for g in groups["groups"]]
    code, created, headers = await http.request(
        "POST", PODS, pod("lone", schedulingGroup={"podGroupName": "nowhere"})
    )
    assert code == 201
    assert "schedulingGroup" not in created["spec"]
    assert headers.getall("Warning", []) == [], "a disabled field is dropped silently"
    await wait_until(lambda: cluster.scheduler.reasons == {} and _bound(cluster, "lone"))
    assert cluster.scheduler.gang_cycles == {}


def _bound(cluster: Emulator, name: str) -> bool:
    found = cluster.registry.storage.peek("/pods", "default", name) or {}
    return bool((found.get("spec") or {}).get("nodeName"))
