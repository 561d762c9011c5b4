"""Corpus section 11: a ServiceAccount's allocation write needs `resourceclaims/binding`."""

from __future__ import annotations

from .conftest import Case, Replay, assert_same_shape, load

NAMESPACE = "authz-ref"
ACCOUNT = "claim-writer"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _rule(*resources: str) -> dict[str, object]:
    return {
        "apiGroups": ["resource.k8s.io"],
        "resources": list(resources),
        "verbs": ["create", "update", "patch"],
    }


async def _grant(reference: Replay, name: str, rule: dict[str, object]) -> None:
    """A ClusterRole with `rule`, bound to the ServiceAccount (as the capture's setup did)."""
    role = await reference.call(
        "POST", f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": [rule]}
    )
    binding = await reference.call(
        "POST",
        f"{RBAC}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        },
    )
    assert (role.status, binding.status) == (201, 201)


async def _claim_writer(reference: Replay) -> str:
    """The namespace, the ServiceAccount's rights on claims and their status, its claim c1
    (created by the ServiceAccount itself, as captured) and its token."""
    created = await reference.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    assert created.status == 201
    await _grant(reference, ACCOUNT, _rule("resourceclaims", "resourceclaims/status"))
    token = reference.cluster.service_account_token(NAMESPACE, ACCOUNT)
    spec = load("11-02")["response"]["body"]["spec"]
    claim = await reference.send(
        {
            "method": "POST",
            "path": f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
            "query": {},
            "headers": {"content-type": "application/json"},
            "body": {"metadata": {"name": "c1"}, "spec": spec},
        },
        token=token,
    )
    assert claim.status == 201, claim.body
    return token


async def test_allocation_without_binding_permission_is_invalid(reference: Replay) -> None:
    token = await _claim_writer(reference)
    reply = await reference.replay("11-01", token=token)
    assert_same_shape(Case("11-01"), load("11-01"), reply)
    stored = await reference.call(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/c1"
    )
    assert "allocation" not in (stored.body.get("status") or {})


async def test_allocation_with_binding_permission_is_written(reference: Replay) -> None:
    token = await _claim_writer(reference)
    await _grant(reference, "claim-binder", _rule("resourceclaims/binding"))
    reply = await reference.replay("11-02", token=token)
    expected = load("11-02")
    assert_same_shape(Case("11-02"), expected, reply)
    assert reply.body["status"] == expected["response"]["body"]["status"]
