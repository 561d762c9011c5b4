"""Issue item 1: /version, /api, /apis and per group/version resource lists."""

from __future__ import annotations

from kubernetes_asyncio import client

from .conftest import Http


async def test_version_reports_kubernetes_1_36(api: client.ApiClient) -> None:
    info = await client.VersionApi(api).get_code()
    assert (info.major, info.minor, info.git_version) == ("1", "36", "v1.36.2")


async def test_core_api_lists_v1_and_its_resources(http: Http) -> None:
    code, body, _ = await http.request("GET", "/api")
    assert (code, body["kind"], body["versions"]) == (200, "APIVersions", ["v1"])
    code, body, _ = await http.request("GET", "/api/v1")
    resources = {r["name"]: r for r in body["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "namespaces",
        "nodes",
        "services",
        "events",
    } <= set(resources)
    assert resources["pods"]["shortNames"] == ["po"] and resources["pods"]["namespaced"] is True
    assert resources["nodes"]["namespaced"] is False
    assert "deletecollection" not in resources["namespaces"]["verbs"]
    assert resources["pods/eviction"]["group"] == "policy"


async def test_group_list_names_dra_coordination_and_the_crd_group(http: Http) -> None:
    _, body, _ = await http.request("GET", "/apis")
    groups = {g["name"]: g for g in body["groups"]}
    assert {"resource.k8s.io", "coordination.k8s.io", "apiextensions.k8s.io", "gangq.dev"} <= set(
        groups
    )
    assert groups["resource.k8s.io"]["preferredVersion"] == {
        "groupVersion": "resource.k8s.io/v1",
        "version": "v1",
    }


async def test_resource_list_of_dra_and_of_the_custom_resource(http: Http) -> None:
    _, body, _ = await http.request("GET", "/apis/resource.k8s.io/v1")
    names = [r["name"] for r in body["resources"]]
    assert names == [
        "deviceclasses",
        "resourceclaims",
        "resourceclaims/status",
        "resourceclaimtemplates",
        "resourceslices",
    ]
    _, body, _ = await http.request("GET", "/apis/gangq.dev/v1alpha1")
    training = next(r for r in body["resources"] if r["name"] == "trainingjobs")
    assert (training["kind"], training["shortNames"], training["categories"]) == (
        "TrainingJob",
        ["tj"],
        ["gangq"],
    )
    assert any(r["name"] == "trainingjobs/status" for r in body["resources"])


async def test_aggregated_discovery_is_served_on_request(http: Http) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    _, body, _ = await http.request("GET", "/apis", headers={"Accept": accept})
    assert body["kind"] == "APIGroupDiscoveryList"
    gangq = next(item for item in body["items"] if item["metadata"]["name"] == "gangq.dev")
    assert gangq["versions"][0]["resources"][0]["resource"] == "trainingjobs"


async def test_unknown_group_is_plain_text_and_unknown_core_resource_is_a_status(
    http: Http,
) -> None:
    code, body, _ = await http.request("GET", "/apis/nosuch.example.com/v1/widgets")
    assert (code, body) == (404, "404 page not found\n")
    code, body, _ = await http.request("GET", "/api/v1/nosuchresources")
    assert (code, body["kind"], body["details"]) == (404, "Status", {})


async def test_missing_and_wrong_tokens_are_403_and_401(cluster: object, http: Http) -> None:
    session = http.session
    async with session.get(
        http.base + "/api/v1/namespaces", headers={"Authorization": ""}
    ) as response:
        assert response.status == 403
    async with session.get(
        http.base + "/api/v1/namespaces", headers={"Authorization": "Bearer nope"}
    ) as response:
        assert response.status == 401
