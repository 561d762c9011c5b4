"""The controller asks for nothing deploy/ does not grant it, and without the 1.36 rule on
`resourceclaims/binding` it is refused as a real cluster refused it.

The emulator records the authorization attributes of every request per user (and of the
synthetic `resourceclaims/binding` check of an allocation write); after a run through the
lifecycle (admission, a failed attempt and its restart, success, a deletion mid-run) each
resource request of gangq's ServiceAccount must be granted by a rule of the shipped ClusterRole
or, in its own namespace, of a shipped Role bound to it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from gangq.queue.demo import serviceaccount
from gangq.queue.kube import resources
from gangq.queue.kube.client import Kube, KubeError
from gangq.queue.kubesim import authorization, kinds
from gangq.queue.kubesim.emulator import Emulator
from gangq.queue.kubesim.requestinfo import Attributes
from tests.controller.conftest import CRD, SMALL, Harness, training_job, wait_for

GANGQ = {
    "kind": "ServiceAccount",
    "name": serviceaccount.NAME,
    "namespace": serviceaccount.NAMESPACE,
}


def shipped_grants() -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace the rule applies in, None for everywhere; rule) of every shipped role that
    a shipped binding gives gangq's ServiceAccount."""
    documents = serviceaccount.shipped_rbac()
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in documents
    }
    grants: list[tuple[str | None, dict[str, Any]]] = []
    for binding in documents:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if GANGQ not in binding.get("subjects", []):
            continue
        namespace = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role_namespace = namespace if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_namespace, ref["name"])]
        grants += [(namespace, rule) for rule in role["rules"]]
    return grants


def granted(attributes: Attributes, grants: list[tuple[str | None, dict[str, Any]]]) -> bool:
    return any(
        (namespace is None or namespace == attributes.namespace)
        and authorization.rule_allows(rule, attributes)
        for namespace, rule in grants
    )


async def test_every_request_of_a_run_is_granted_by_the_shipped_rbac(harness: Harness) -> None:
    harness.start()
    kube = harness.kube
    await kube.create(resources.TRAINING_JOBS, "ml-train", training_job("done"))
    flaky = training_job("flaky", run_seconds=0.2, exit_code=1, maxRestarts=1)
    await kube.create(resources.TRAINING_JOBS, "ml-train", flaky)
    await wait_for(lambda: harness.phase("done") == "Succeeded", within_s=30)
    await wait_for(lambda: harness.phase("flaky") == "Failed", within_s=30)
    await kube.create(resources.TRAINING_JOBS, "ml-train", training_job("gone", run_seconds=None))
    await wait_for(lambda: harness.phase("gone") == "Running")
    await kube.delete(resources.TRAINING_JOBS, "ml-train", "gone")
    await wait_for(lambda: harness.job("gone") is None)
    requested = harness.cluster.authorizer.requested[serviceaccount.USER]
    issued = sorted(
        (a.verb, a.api_group, a.combined_resource, a.namespace)
        for a in requested
        if a.resource_request
    )
    grants = shipped_grants()
    assert [
        attributes
        for attributes in requested
        if attributes.resource_request and not granted(attributes, grants)
    ] == [], issued
    binding = Attributes(
        verb="patch",
        path="",
        resource_request=True,
        api_group="resource.k8s.io",
        api_version="v1",
        resource="resourceclaims",
        subresource="binding",
    )
    assert binding in requested, issued
    assert ("create", "", "pods", "ml-train") in issued
    assert ("patch", "resource.k8s.io", "resourceclaims/status", "ml-train") in issued
    # Discovery is granted to every authenticated user by the bootstrap roles.
    account = authorization.service_account(serviceaccount.NAMESPACE, serviceaccount.NAME)
    user = authorization.User(account.name, (*account.groups, authorization.AUTHENTICATED))
    paths = [a for a in requested if not a.resource_request]
    assert all(harness.cluster.authorizer.authorize(user, a).allowed for a in paths), paths


REPORTED = (
    'ResourceClaim.resource.k8s.io "llm-prod-0" is invalid: status.allocation: Forbidden: '
    "changing status.allocation or status.reservedFor requires "
    'resource="resourceclaims/binding", verb="patch" permission: resourceclaims.resource.k8s.io '
    'is forbidden: User "system:serviceaccount:gangq-system:gangq" cannot patch resource '
    '"resourceclaims/binding" in API group "resource.k8s.io" at the cluster scope'
)
"""What a real 1.36.2 API server answered gangq's allocation writes under the old RBAC."""
CLAIM = {
    "metadata": {"name": "llm-prod-0"},
    "spec": {
        "devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
            ]
        }
    },
}
RESULT = {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-0", "device": "gpu-0-0"}


async def test_without_the_binding_rule_the_allocation_write_is_refused_as_reported() -> None:
    """The shipped RBAC minus `resourceclaims/binding` (the RBAC gangq shipped before) gets
    the refusal the real cluster gave, through the controller's own client; the shipped RBAC
    gets the write through."""
    documents = serviceaccount.shipped_rbac()
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    role["rules"] = [r for r in role["rules"] if "resourceclaims/binding" not in r["resources"]]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gangq-system"}}
    async with Emulator(inventory=SMALL, crds=(CRD,)) as cluster:
        cluster.apply([namespace, *documents])
        token = cluster.service_account_token(serviceaccount.NAMESPACE, serviceaccount.NAME)
        name = "llm-prod-0"
        cluster.registry.create(kinds.RESOURCE_CLAIMS, "default", CLAIM)
        allocation = {"status": {"allocation": {"devices": {"results": [RESULT]}}}}
        async with client.ApiClient(cluster.configuration(token)) as api_client:
            kube = Kube(api_client)
            try:
                with pytest.raises(KubeError) as refused:
                    await kube.patch(
                        resources.RESOURCE_CLAIMS, "default", name, allocation, subresource="status"
                    )
                assert refused.value.status == 422
                assert refused.value.message.endswith(f": {REPORTED}")
                cluster.apply(serviceaccount.shipped_rbac())
                await kube.patch(
                    resources.RESOURCE_CLAIMS, "default", name, allocation, subresource="status"
                )
            finally:
                await kube.close()
        stored = cluster.registry.get(kinds.RESOURCE_CLAIMS, "default", name)
        assert stored["status"]["allocation"]["devices"]["results"] == [RESULT]
