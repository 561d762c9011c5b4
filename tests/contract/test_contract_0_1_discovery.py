"""Corpus sections 0 (namespace lifecycle) and 1 (discovery, auth, unknown paths)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Case, Replay, load, run


async def _content_with_finalizer(reference: Replay) -> None:
    """Keeps the namespace Terminating long enough to observe it, as the capture did."""
    body = {"metadata": {"name": "keep", "finalizers": ["gangq.dev/hold"]}}
    await reference.call("POST", "/api/v1/namespaces/ref/configmaps", body)


SECTION_0 = [
    Case("0-02", setup=(_content_with_finalizer,), paths=("status.phase", "spec.finalizers")),
    Case("0-03", setup=(_content_with_finalizer, "0-02"), paths=("status.phase",)),
]


@pytest.mark.parametrize("case", SECTION_0, ids=str)
async def test_section_0_namespace(reference: Replay, case: Case) -> None:
    await run(reference, case)


SECTION_1 = [
    Case("1-01", paths=("major", "minor", "gitVersion", "emulationMinor", "minCompatibilityMinor")),
    Case("1-02", paths=("kind", "versions")),
    Case("1-14"),
    Case("1-15"),
]


@pytest.mark.parametrize("case", SECTION_1, ids=str)
async def test_section_1_discovery(reference: Replay, case: Case) -> None:
    await run(reference, case)


@pytest.mark.parametrize(
    ("name", "authorization"), [("1-12", None), ("1-13", "Bearer not-the-token")]
)
async def test_section_1_authentication(
    reference: Replay, name: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    url = reference.cluster.base_url + load(name)["request"]["path"]
    async with reference.session.get(url, headers=headers) as response:
        body = await response.json()
        status = response.status
    expected = load(name)["response"]
    assert status == expected["status"]
    assert (body["reason"], body["code"]) == (expected["body"]["reason"], expected["body"]["code"])
    assert body["message"] == expected["body"]["message"]


def _resources(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {resource["name"]: resource for resource in body["resources"]}


SERVED = {
    "pods",
    "pods/status",
    "pods/binding",
    "pods/eviction",
    "namespaces",
    "nodes",
    "services",
    "events",
    "configmaps",
    "bindings",
    "deviceclasses",
    "resourceclaims",
    "resourceclaims/status",
    "resourceclaimtemplates",
    "resourceslices",
    "leases",
    "customresourcedefinitions",
    "customresourcedefinitions/status",
}
KEYS = (
    "name",
    "singularName",
    "namespaced",
    "kind",
    "verbs",
    "shortNames",
    "categories",
    "group",
    "version",
)


@pytest.mark.parametrize("name", ["1-03", "1-05", "1-06", "1-07"])
async def test_section_1_resource_lists(reference: Replay, name: str) -> None:
    expected = _resources(load(name)["response"]["body"])
    reply = await reference.replay(name)
    assert reply.body["groupVersion"] == load(name)["response"]["body"]["groupVersion"]
    actual = _resources(reply.body)
    for resource in sorted(SERVED & set(expected)):
        assert {k: actual[resource].get(k) for k in KEYS} == {
            k: expected[resource].get(k) for k in KEYS
        }, resource


@pytest.mark.parametrize("name", ["1-04", "1-10"])
async def test_section_1_group_list(reference: Replay, name: str) -> None:
    reply = await reference.replay(name)
    assert reply.body["kind"] == "APIGroupList"
    ours = {group["name"]: group for group in reply.body["groups"]}
    served = [g for g in load(name)["response"]["body"]["groups"] if g["name"] in ours]
    assert {g["name"] for g in served} == {
        "apiextensions.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
    }
    for group in served:
        assert ours[group["name"]]["preferredVersion"] == group["preferredVersion"]
        assert all(version in group["versions"] for version in ours[group["name"]]["versions"])


async def test_section_1_aggregated_discovery_and_etag(reference: Replay) -> None:
    for name in ("1-08", "1-09"):
        reply = await reference.replay(name)
        expected = load(name)["response"]["body"]
        assert (reply.body["kind"], reply.body["apiVersion"]) == (
            expected["kind"],
            expected["apiVersion"],
        )
        assert reply.headers["Vary"] == "Accept"
    request = load("1-11")["request"]
    first = await reference.send(request)
    headers = {
        "Authorization": "Bearer reference-token",
        "Accept": request["headers"]["accept"],
        "If-None-Match": first.headers["ETag"],
    }
    async with reference.session.get(
        reference.cluster.base_url + "/apis", headers=headers
    ) as response:
        assert response.status == load("1-11")["response"]["status"] == 304


def test_corpus_lists_every_section() -> None:
    for section in range(10):
        assert load(f"{section}-01")["request"]["method"]
