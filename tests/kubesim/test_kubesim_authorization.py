"""RBAC as kube-apiserver enforces it: ServiceAccount tokens, roles and bindings, 403 wording,
discovery for everyone, the admin unrestricted, and the DRA binding rule on claim status."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gangq.queue.kubesim import requestinfo
from gangq.queue.kubesim.emulator import Emulator
from tests.kubesim.conftest import Http, claim

RBAC = "/apis/rbac.authorization.k8s.io/v1"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
ACCOUNT = 'User "system:serviceaccount:team:worker"'


@pytest.fixture
async def worker(cluster: Emulator) -> Any:
    """Plain HTTP as the ServiceAccount team:worker, which nothing is granted to yet."""
    token = cluster.service_account_token("team", "worker")
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        yield Http(session, cluster.base_url)


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


_WORKER = [{"kind": "ServiceAccount", "name": "worker", "namespace": "team"}]


async def _grant(
    http: Http, rules: list[dict[str, Any]], *, namespace: str | None = None, name: str = "grant"
) -> None:
    """A Role (in `namespace`) or a ClusterRole with `rules`, bound to team:worker."""
    where = f"{RBAC}/namespaces/{namespace}" if namespace else RBAC
    kind = "Role" if namespace else "ClusterRole"
    role = {"metadata": {"name": name}, "rules": rules}
    code, body, _ = await http.request("POST", f"{where}/{kind.lower()}s", role)
    assert code == 201, body
    binding = {"metadata": {"name": name}, "roleRef": _ref(kind, name), "subjects": _WORKER}
    code, body, _ = await http.request("POST", f"{where}/{kind.lower()}bindings", binding)
    assert code == 201, body


async def test_a_service_account_without_grants_gets_the_real_403s(worker: Http) -> None:
    code, body, _ = await worker.request("POST", "/api/v1/namespaces/team/pods", {})
    assert code == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods is forbidden: {ACCOUNT} cannot create resource "pods" in API group "" '
        'in the namespace "team"',
        "reason": "Forbidden",
        "details": {"kind": "pods"},
        "code": 403,
    }
    _, body, _ = await worker.request("GET", "/api/v1/namespaces/team/pods/x")
    assert body["message"] == (
        f'pods "x" is forbidden: {ACCOUNT} cannot get resource "pods" in API group "" '
        'in the namespace "team"'
    )
    assert body["details"] == {"name": "x", "kind": "pods"}
    _, body, _ = await worker.request("GET", "/apis/resource.k8s.io/v1/resourceslices")
    assert body["message"] == (
        f"resourceslices.resource.k8s.io is forbidden: {ACCOUNT} cannot list resource "
        '"resourceslices" in API group "resource.k8s.io" at the cluster scope'
    )
    assert body["details"] == {"group": "resource.k8s.io", "kind": "resourceslices"}
    _, body, _ = await worker.request(
        "PATCH",
        "/api/v1/namespaces/team/pods/x/status",
        {},
        content_type="application/merge-patch+json",
    )
    assert 'cannot patch resource "pods/status"' in body["message"]
    _, body, _ = await worker.request("GET", "/metrics")
    assert (body["message"], body["details"]) == (
        f'forbidden: {ACCOUNT} cannot get path "/metrics"',
        {},
    )


async def test_watch_and_a_name_selected_list_are_authorized_as_such(worker: Http) -> None:
    _, body, _ = await worker.request("GET", "/api/v1/nodes", params={"watch": "true"})
    assert 'cannot watch resource "nodes"' in body["message"]
    _, body, _ = await worker.request(
        "GET", "/api/v1/nodes", params={"fieldSelector": "metadata.name=gpu-0"}
    )
    assert body["message"].startswith('nodes "gpu-0" is forbidden: ')
    _, body, _ = await worker.request("DELETE", "/api/v1/namespaces/team/pods")
    assert 'cannot deletecollection resource "pods"' in body["message"]


async def test_every_authenticated_user_may_discover(worker: Http, cluster: Emulator) -> None:
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/resource.k8s.io/v1"):
        code, _, _ = await worker.request("GET", path)
        assert code == 200, path
    async with (
        aiohttp.ClientSession() as anonymous,
        anonymous.get(cluster.base_url + "/version") as version,
        anonymous.get(cluster.base_url + "/api") as api,
    ):
        assert version.status == 200
        assert api.status == 403
        assert (await api.json())["message"] == (
            'forbidden: User "system:anonymous" cannot get path "/api"'
        )


async def test_a_role_grants_only_in_its_namespace(http: Http, worker: Http) -> None:
    code, _, _ = await http.request("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert code == 201
    await _grant(
        http, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}], namespace="team"
    )
    code, _, _ = await worker.request(
        "POST", "/api/v1/namespaces/team/configmaps", {"metadata": {"name": "c"}}
    )
    assert code == 201
    code, body, _ = await worker.request("GET", "/api/v1/namespaces/default/configmaps")
    assert code == 403, body
    code, _, _ = await worker.request("GET", "/api/v1/configmaps")
    assert code == 403


async def test_resource_names_and_subresource_wildcards(http: Http, worker: Http) -> None:
    await _grant(
        http,
        [
            {
                "apiGroups": [""],
                "resources": ["nodes"],
                "resourceNames": ["gpu-0"],
                "verbs": ["get"],
            },
            {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]},
        ],
    )
    assert (await worker.request("GET", "/api/v1/nodes/gpu-0"))[0] == 200
    assert (await worker.request("GET", "/api/v1/nodes/gpu-1"))[0] == 403
    assert (await worker.request("GET", "/api/v1/nodes"))[0] == 403
    assert (await worker.request("GET", "/api/v1/nodes/gpu-1/status"))[0] == 200


async def test_a_binding_to_a_missing_role_says_so(http: Http, worker: Http) -> None:
    binding = {
        "metadata": {"name": "b"},
        "roleRef": _ref("ClusterRole", "gone"),
        "subjects": _WORKER,
    }
    code, _, _ = await http.request("POST", f"{RBAC}/clusterrolebindings", binding)
    assert code == 201
    _, body, _ = await worker.request("GET", "/api/v1/nodes")
    assert body["message"].endswith(
        ': RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )


async def test_a_binding_never_changes_its_role(http: Http) -> None:
    binding = {"metadata": {"name": "b"}, "roleRef": _ref("ClusterRole", "a"), "subjects": _WORKER}
    await http.request("POST", f"{RBAC}/clusterrolebindings", binding)
    code, body, _ = await http.request(
        "PATCH",
        f"{RBAC}/clusterrolebindings/b",
        {"roleRef": {"name": "other"}},
        content_type="application/merge-patch+json",
    )
    assert code == 422
    assert body["details"]["causes"][0]["field"] == "roleRef"
    assert body["message"].endswith(": cannot change roleRef")


async def test_tokens_for_other_audiences_or_unknown_are_unauthorized(cluster: Emulator) -> None:
    other = cluster.token_reviews.issue("someone", audiences=("gangq",))
    for token in (other, "not-a-token"):
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.get(cluster.base_url + "/version") as response,
        ):
            assert response.status == 401


async def test_the_admin_token_is_unrestricted(http: Http, cluster: Emulator) -> None:
    assert (await http.request("GET", "/metrics"))[0] == 200
    assert (await http.request("GET", "/api/v1/nodes"))[0] == 200
    assert "kubernetes-admin" in cluster.authorizer.requested


ALLOCATION = {
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": "gpu.nvidia.com",
                        "pool": "gpu-0",
                        "device": "gpu-0-0",
                    }
                ]
            }
        }
    }
}


async def test_a_put_needs_update_on_binding_and_unchanged_allocations_need_nothing(
    http: Http, worker: Http
) -> None:
    claim_rules = {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceclaims/status"],
        "verbs": ["get", "create", "update", "patch"],
    }
    await _grant(http, [claim_rules])
    await _grant(
        http,
        [
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/binding"],
                "verbs": ["patch"],
            }
        ],
        name="binder",
    )
    assert (await worker.request("POST", CLAIMS, claim("c")))[0] == 201
    _, current, _ = await worker.request("GET", f"{CLAIMS}/c")
    code, body, _ = await worker.request("PUT", f"{CLAIMS}/c/status", current | ALLOCATION)
    assert code == 422
    assert 'verb="update" permission' in body["message"]
    code, written, _ = await worker.request(
        "PATCH", f"{CLAIMS}/c/status", ALLOCATION, content_type="application/merge-patch+json"
    )
    assert code == 200, written
    labelled = {"metadata": {"labels": {"a": "b"}}}
    code, _, _ = await worker.request(
        "PATCH", f"{CLAIMS}/c", labelled, content_type="application/merge-patch+json"
    )
    assert code == 200
    _, current, _ = await worker.request("GET", f"{CLAIMS}/c")
    code, _, _ = await worker.request("PUT", f"{CLAIMS}/c/status", current)
    assert code == 200


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "", "ns", "ns")),
        (
            "PUT",
            "/api/v1/namespaces/ns/finalize",
            {},
            ("update", "", "namespaces", "finalize", "ns", "ns"),
        ),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "pods", "", "ns", "")),
        ("GET", "/api/v1/watch/nodes/gpu-0", {}, ("watch", "", "nodes", "", "", "gpu-0")),
        ("GET", "/api/v1/nodes", {"watch": "1"}, ("watch", "", "nodes", "", "", "")),
        (
            "GET",
            "/api/v1/pods",
            {"fieldSelector": "spec.nodeName=a,metadata.name==p"},
            ("list", "", "pods", "", "", "p"),
        ),
        (
            "GET",
            "/api/v1/pods",
            {"fieldSelector": "metadata.name!=p"},
            ("list", "", "pods", "", "", ""),
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            {},
            ("create", "", "pods", "eviction", "ns", "p"),
        ),
        ("POST", "/api/v1/namespaces/ns/bindings", {}, ("create", "", "bindings", "", "ns", "")),
        (
            "DELETE",
            "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims",
            {},
            ("deletecollection", "resource.k8s.io", "resourceclaims", "", "ns", ""),
        ),
        ("GET", "/apis/nope.example/v1/things", {}, ("list", "nope.example", "things", "", "", "")),
    ],
)
def test_request_attributes_come_from_the_url_as_upstream_parses_it(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    parsed = requestinfo.parse(method, path, query)
    assert parsed.resource_request
    assert (
        parsed.verb,
        parsed.api_group,
        parsed.resource,
        parsed.subresource,
        parsed.namespace,
        parsed.name,
    ) == expected


@pytest.mark.parametrize(
    "path", ["/api", "/api/v1", "/apis", "/apis/resource.k8s.io/v1", "/version"]
)
def test_discovery_paths_are_not_resource_requests(path: str) -> None:
    parsed = requestinfo.parse("GET", path, {})
    assert (parsed.resource_request, parsed.verb, parsed.path) == (False, "get", path)


@pytest.mark.parametrize("flag", ["t", "TRUE", "1"])
async def test_what_is_authorized_as_a_watch_is_served_as_one(
    http: Http, worker: Http, flag: str
) -> None:
    """`watch` is read as Go's ParseBool reads it, once: a request authorized as a watch
    streams events, and a ServiceAccount allowed only to list is refused it."""
    code, _, _ = await http.request("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert code == 201
    events = await http.watch("/api/v1/namespaces", {"watch": flag, "timeoutSeconds": "1"})
    assert {event["type"] for event in events} == {"ADDED"}
    await _grant(http, [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}])
    assert (await worker.request("GET", "/api/v1/namespaces"))[0] == 200
    code, body, _ = await worker.request(
        "GET", "/api/v1/namespaces", params={"watch": flag, "timeoutSeconds": "1"}
    )
    assert (code, body["reason"]) == (403, "Forbidden")
    assert "cannot watch resource" in body["message"]
