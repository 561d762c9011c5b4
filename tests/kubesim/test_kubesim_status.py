"""Issue item 4: the main endpoint ignores status, /status ignores everything else."""

from __future__ import annotations

from kubernetes_asyncio import client

from .conftest import Http, claim, pod

PODS = "/api/v1/namespaces/default/pods"
TRAINING = "/apis/gangq.dev/v1alpha1/namespaces/default/trainingjobs"
MERGE = "application/merge-patch+json"


async def test_pod_main_endpoint_ignores_status_and_status_endpoint_ignores_spec(
    http: Http,
) -> None:
    _, created, _ = await http.request("POST", PODS, pod("s", gates=("gangq.dev/admission",)))
    changed = dict(created, status={"phase": "Failed"})
    _, after_put, _ = await http.request("PUT", f"{PODS}/s", changed)
    assert after_put["status"]["phase"] == "Pending"
    patch = {
        "spec": {"activeDeadlineSeconds": 5},
        "metadata": {"labels": {"via": "status"}},
        "status": {"message": "hello"},
    }
    _, after_status, _ = await http.request("PATCH", f"{PODS}/s/status", patch, content_type=MERGE)
    assert "activeDeadlineSeconds" not in after_status["spec"]
    assert after_status["metadata"]["labels"] == {"via": "status"}
    assert after_status["status"]["message"] == "hello"
    assert after_status["metadata"]["generation"] == 1


async def test_claim_status_is_written_only_through_the_subresource(api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(api)
    created = await resource.create_namespaced_resource_claim("default", claim("c"))
    body = api.sanitize_for_serialization(created)
    body["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": "gpu.nvidia.com",
                        "pool": "gpu-0",
                        "device": "gpu-0",
                    }
                ]
            }
        }
    }
    after_put = await resource.replace_namespaced_resource_claim("c", "default", body)
    assert after_put.status.allocation is None
    after_status = await resource.replace_namespaced_resource_claim_status("c", "default", body)
    assert after_status.status.allocation.devices.results[0].device == "gpu-0"


async def test_custom_resource_status_ignores_spec_and_labels_and_keeps_generation(
    http: Http,
) -> None:
    job = {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {"tier": "training", "replicas": 2, "devicesPerReplica": 8, "template": {}},
        "status": {"phase": "Running"},
    }
    _, created, _ = await http.request("POST", TRAINING, job)
    assert "status" not in created
    patch = {
        "spec": {"replicas": 1},
        "metadata": {"labels": {"x": "y"}},
        "status": {"phase": "Queued", "queuePosition": 3},
    }
    code, body, _ = await http.request("PATCH", f"{TRAINING}/j/status", patch, content_type=MERGE)
    assert code == 200
    assert (
        body["spec"]["replicas"],
        body["metadata"].get("labels"),
        body["status"]["queuePosition"],
    ) == (2, None, 3)
    assert body["metadata"]["generation"] == 1
    code, body, _ = await http.request(
        "PATCH",
        f"{TRAINING}/j",
        {"spec": {"replicas": 3}, "status": {"phase": "Failed"}},
        content_type=MERGE,
    )
    assert (body["spec"]["replicas"], body["status"]["phase"], body["metadata"]["generation"]) == (
        3,
        "Queued",
        2,
    )
    code, body, _ = await http.request(
        "PATCH", f"{TRAINING}/j/status", {"status": {"phase": "Exploded"}}, content_type=MERGE
    )
    assert (code, body["details"]["causes"][0]["reason"]) == (422, "FieldValueNotSupported")
    duplicate = [
        {
            "op": "add",
            "path": "/status/conditions",
            "value": [{"type": "A", "status": "True"}, {"type": "A", "status": "False"}],
        }
    ]
    code, body, _ = await http.request(
        "PATCH", f"{TRAINING}/j/status", duplicate, content_type="application/json-patch+json"
    )
    assert (code, body["message"]) == (
        422,
        'TrainingJob.gangq.dev "j" is invalid: status.conditions[1]: Duplicate value: {"type":"A"}',
    )
