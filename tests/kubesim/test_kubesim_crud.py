"""Issue item 2: CRUD, list and watch for every served kind, with real Status bodies."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from kubernetes_asyncio import client, watch

from gangq.queue.kubesim import registry

from .conftest import Http, claim, pod

LEASE = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "gangq-leader"},
    "spec": {
        "holderIdentity": "gangq-0",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T00:00:00.000000Z",
        "renewTime": "2026-01-01T00:00:00.000000Z",
    },
}


def _body(error: client.ApiException) -> dict[str, Any]:
    return dict(json.loads(error.body))


async def test_typed_clients_create_read_list_and_delete_every_builtin_kind(
    api: client.ApiClient,
) -> None:
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    coordination = client.CoordinationV1Api(api)
    await core.create_namespace({"metadata": {"name": "team"}})
    await core.create_namespaced_pod("team", pod("p"))
    await core.create_namespaced_service(
        "team",
        {"metadata": {"name": "job"}, "spec": {"clusterIP": "None", "ports": [{"port": 29500}]}},
    )
    await core.create_namespaced_event(
        "team",
        {
            "metadata": {"name": "e.1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team"},
            "reason": "Test",
            "message": "hello",
        },
    )
    await coordination.create_namespaced_lease("team", LEASE)
    await resource.create_namespaced_resource_claim("team", claim("c"))
    await resource.create_namespaced_resource_claim_template(
        "team", {"metadata": {"name": "t"}, "spec": {"spec": claim("x")["spec"]}}
    )
    assert [p.metadata.name for p in (await core.list_namespaced_pod("team")).items] == ["p"]
    assert (await core.read_namespaced_service("job", "team")).spec.cluster_ip == "None"
    assert (await core.list_namespaced_event("team")).items[0].reason == "Test"
    assert (
        await coordination.read_namespaced_lease("gangq-leader", "team")
    ).spec.holder_identity == "gangq-0"
    assert (await resource.read_namespaced_resource_claim("c", "team")).spec.devices.requests[
        0
    ].exactly.count == 1
    assert (
        await resource.read_namespaced_resource_claim_template("t", "team")
    ).metadata.name == "t"
    assert len((await resource.list_resource_slice()).items) == 2
    assert (await resource.read_device_class("gpu.nvidia.com")).spec.selectors[
        0
    ].cel.expression == 'device.driver == "gpu.nvidia.com"'
    assert len((await core.list_node()).items) == 2
    await coordination.delete_namespaced_lease("gangq-leader", "team")
    with pytest.raises(client.ApiException) as missing:
        await coordination.read_namespaced_lease("gangq-leader", "team")
    assert _body(missing.value)["details"] == {
        "name": "gangq-leader",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }


async def test_custom_resources_are_validated_and_defaulted(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    job = {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "train"},
        "spec": {
            "tier": "training",
            "replicas": 4,
            "devicesPerReplica": 8,
            "topology": {"key": "gangq.dev/rack"},
            "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}},
        },
    }
    created = await custom.create_namespaced_custom_object(
        "gangq.dev", "v1alpha1", "default", "trainingjobs", job
    )
    assert created["spec"]["deviceClassName"] == "gpu.nvidia.com"
    assert (
        created["spec"]["priority"],
        created["spec"]["maxRestarts"],
        created["spec"]["startupTimeoutSeconds"],
    ) == (0, 3, 600)
    assert created["spec"]["topology"] == {"key": "gangq.dev/rack", "mode": "Preferred"}
    assert created["metadata"]["generation"] == 1
    bad = dict(
        job, metadata={"name": "bad"}, spec=dict(job["spec"], replicas=0, tier="Not A Label")
    )
    with pytest.raises(client.ApiException) as invalid:
        await custom.create_namespaced_custom_object(
            "gangq.dev", "v1alpha1", "default", "trainingjobs", bad
        )
    body = _body(invalid.value)
    assert (body["code"], body["reason"], body["details"]["kind"], body["details"]["group"]) == (
        422,
        "Invalid",
        "TrainingJob",
        "gangq.dev",
    )
    fields = [cause["field"] for cause in body["details"]["causes"]]
    assert fields == ["spec.tier", "spec.replicas"]
    assert body["message"].startswith(
        'TrainingJob.gangq.dev "bad" is invalid: [spec.tier: Invalid value: "Not A Label": '
        "spec.tier in body should match"
    )


async def test_tier_is_immutable_through_the_transition_rule(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    job = {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "t"},
        "spec": {"tier": "training", "replicas": 1, "devicesPerReplica": 1, "template": {}},
    }
    await custom.create_namespaced_custom_object(
        "gangq.dev", "v1alpha1", "default", "trainingjobs", job
    )
    with pytest.raises(client.ApiException) as immutable:
        await custom.patch_namespaced_custom_object(
            "gangq.dev",
            "v1alpha1",
            "default",
            "trainingjobs",
            "t",
            {"spec": {"tier": "small"}},
            _content_type="application/merge-patch+json",
        )
    assert (
        _body(immutable.value)["message"]
        == 'TrainingJob.gangq.dev "t" is invalid: spec.tier: Invalid value: "small": '
        "tier is immutable"
    )


async def test_unknown_fields_warn_by_default_and_fail_in_strict_mode(http: Http) -> None:
    body = pod("odd")
    body["spec"]["bogusField"] = 1
    code, created, headers = await http.request("POST", "/api/v1/namespaces/default/pods", body)
    assert code == 201 and "bogusField" not in created["spec"]
    assert headers.getall("Warning") == ['299 - "unknown field \\"spec.bogusField\\""']
    body["metadata"]["name"] = "odd-strict"
    code, status, _ = await http.request(
        "POST", "/api/v1/namespaces/default/pods", body, params={"fieldValidation": "Strict"}
    )
    assert (code, status["message"]) == (
        400,
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.bogusField"',
    )


async def test_create_conflicts_and_missing_namespace_have_real_status_shapes(http: Http) -> None:
    await http.request("POST", "/api/v1/namespaces/default/pods", pod("dup"))
    code, body, _ = await http.request("POST", "/api/v1/namespaces/default/pods", pod("dup"))
    assert (code, body["reason"], body["message"], body["details"]) == (
        409,
        "AlreadyExists",
        'pods "dup" already exists',
        {"name": "dup", "kind": "pods"},
    )
    code, body, _ = await http.request(
        "POST", "/api/v1/namespaces/nowhere/configmaps", {"metadata": {"name": "x"}}
    )
    assert (code, body["message"]) == (404, 'namespaces "nowhere" not found')
    code, body, _ = await http.request("POST", "/api/v1/namespaces/default/pods", pod("Upper"))
    assert (code, body["details"]["causes"][0]["field"]) == (422, "metadata.name")


async def test_crd_lifecycle_installs_and_removes_the_resource(
    api: client.ApiClient, http: Http
) -> None:
    extensions = client.ApiextensionsV1Api(api)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    created = await extensions.create_custom_resource_definition(crd)
    assert created.status.conditions is None
    code, _, _ = await http.request(
        "POST",
        "/apis/example.com/v1/widgets",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "anything": 1,
        },
    )
    assert code == 201
    established = await extensions.read_custom_resource_definition("widgets.example.com")
    assert [c.type for c in established.status.conditions] == ["NamesAccepted", "Established"]
    await extensions.delete_custom_resource_definition("widgets.example.com")
    code, _, _ = await http.request("GET", "/apis/example.com/v1/widgets")
    assert code == 404


async def test_watch_through_kubernetes_asyncio_sees_added_modified_deleted(
    api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api)
    listed = await core.list_namespaced_config_map("default")
    await core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    await core.patch_namespaced_config_map("cm", "default", {"data": {"a": "2"}})
    await core.delete_namespaced_config_map("cm", "default")
    seen = []
    async with watch.Watch().stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=1,
    ) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].data))
    assert seen == [("ADDED", {"a": "1"}), ("MODIFIED", {"a": "2"}), ("DELETED", {"a": "2"})]


async def test_the_product_crd_rules_on_topology_and_runtime(http: Http) -> None:
    path = "/apis/gangq.dev/v1alpha1/namespaces/default/trainingjobs"
    spec = {"tier": "training", "replicas": 1, "devicesPerReplica": 8, "template": {}}
    job = {"apiVersion": "gangq.dev/v1alpha1", "kind": "TrainingJob"}
    code, body, _ = await http.request(
        "POST",
        path,
        job | {"metadata": {"name": "no-key"}, "spec": spec | {"topology": {"mode": "Required"}}},
    )
    assert (code, body["details"]["causes"]) == (
        422,
        [
            {
                "reason": "FieldValueInvalid",
                "field": "spec.topology",
                "message": "Invalid value: topology.key is required when topology.mode is "
                "Required or Preferred",
            }
        ],
    )
    code, body, _ = await http.request(
        "POST",
        path,
        job | {"metadata": {"name": "none"}, "spec": spec | {"topology": {"mode": "None"}}},
    )
    assert code == 201
    code, body, _ = await http.request(
        "POST",
        path,
        job | {"metadata": {"name": "short"}, "spec": spec | {"maxRuntimeSeconds": 60}},
    )
    assert body["message"] == (
        'TrainingJob.gangq.dev "short" is invalid: spec.maxRuntimeSeconds: Invalid value: '
        "maxRuntimeSeconds must be >= startupTimeoutSeconds"
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param(
            "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "a"}, "spec": "x"},
            "Pod.spec",
            id="pod-spec",
        ),
        pytest.param(
            "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": 1}]}},
            "Pod.spec.containers[0].image",
            id="container-image",
        ),
        pytest.param(
            "/api/v1/nodes",
            {"metadata": {"name": "a", "labels": {"a": 1}}},
            "Node.metadata.labels.a",
            id="label",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            {"metadata": {"name": "a"}, "spec": {"leaseDurationSeconds": "15"}},
            "Lease.spec.leaseDurationSeconds",
            id="lease-duration",
        ),
    ],
)
async def test_wrongly_typed_fields_are_a_400_naming_the_field(
    http: Http, path: str, body: dict[str, Any], field: str
) -> None:
    code, status, _ = await http.request("POST", path, body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert f"into Go struct field {field} of type" in status["message"]


async def test_a_generated_name_that_is_taken_is_drawn_again(http: Http) -> None:
    """kube-apiserver retries a generateName whose draw collides with an existing object
    (RetryGenerateName, GA since 1.32) instead of answering 409: the emulator draws again."""
    await http.request("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    state = random.getstate()
    taken = "e-" + "".join(random.choice(registry._NAME_SUFFIX) for _ in range(5))
    body = {"metadata": {"name": taken}, "data": {}}
    code, _, _ = await http.request("POST", "/api/v1/namespaces/team/configmaps", body)
    assert code == 201
    random.setstate(state)
    generated = {"metadata": {"generateName": "e-"}, "data": {}}
    code, created, _ = await http.request("POST", "/api/v1/namespaces/team/configmaps", generated)
    assert code == 201, created
    assert created["metadata"]["name"].startswith("e-")
    assert created["metadata"]["name"] != taken
