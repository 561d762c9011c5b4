"""Issue item 7: scheduling gates may only be removed; a gated pod is never scheduled."""

from __future__ import annotations

from kubernetes_asyncio import client

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"
GATE = "gangq.dev/admission"


async def test_adding_or_renaming_a_gate_is_forbidden(http: Http) -> None:
    await http.request("POST", PODS, pod("g", gates=(GATE,)))
    add = [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "gangq.dev/other"}}]
    code, body, _ = await http.request(
        "PATCH", f"{PODS}/g", add, content_type="application/json-patch+json"
    )
    assert (code, body["message"]) == (
        422,
        'Pod "g" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, '
        "but found new scheduling gate 'gangq.dev/other'",
    )
    rename = [
        {"op": "replace", "path": "/spec/schedulingGates/0/name", "value": "gangq.dev/renamed"}
    ]
    code, body, _ = await http.request(
        "PATCH", f"{PODS}/g", rename, content_type="application/json-patch+json"
    )
    assert (code, body["details"]["causes"][0]["reason"]) == (422, "FieldValueForbidden")


async def test_gates_reject_invalid_duplicate_and_node_name_on_create(http: Http) -> None:
    code, body, _ = await http.request("POST", PODS, pod("bad", gates=("not a valid name!",)))
    assert (code, body["details"]["causes"][0]["field"]) == (422, "spec.schedulingGates[0]")
    code, body, _ = await http.request("POST", PODS, pod("dup", gates=(GATE, GATE)))
    assert (
        body["message"]
        == 'Pod "dup" is invalid: spec.schedulingGates[1]: Duplicate value: "gangq.dev/admission"'
    )
    code, body, _ = await http.request("POST", PODS, pod("both", gates=(GATE,), nodeName="gpu-0"))
    assert (
        body["message"] == 'Pod "both" is invalid: spec.nodeName: Forbidden: '
        "cannot be set until all schedulingGates have been cleared"
    )


async def test_a_gated_pod_waits_and_runs_once_released(
    cluster: Emulator, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("wait", gates=(GATE,)))
    assert created.status.conditions[0].reason == "SchedulingGated"
    cluster.scheduler.cycle()
    assert (await core.read_namespaced_pod("wait", "default")).spec.node_name is None
    released = await core.patch_namespaced_pod(
        "wait", "default", [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert released.metadata.generation == 2
    await wait_until(
        lambda: (
            cluster.registry.storage.get("/pods", "default", "wait")["status"]["phase"] == "Running"
        )
    )
    running = await core.read_namespaced_pod("wait", "default")
    assert running.spec.node_name in ("gpu-0", "gpu-1")
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"


async def test_binding_a_gated_or_bound_pod_is_a_conflict(http: Http) -> None:
    await http.request("POST", PODS, pod("gated", gates=(GATE,)))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "gated"},
        "target": {"kind": "Node", "name": "gpu-1"},
    }
    code, body, _ = await http.request("POST", f"{PODS}/gated/binding", binding)
    assert (code, body["message"]) == (
        409,
        'Operation cannot be fulfilled on pods/binding "gated": '
        "pod gated has non-empty .spec.schedulingGates",
    )
    await http.request(
        "PATCH",
        f"{PODS}/gated",
        {"spec": {"schedulingGates": None}},
        content_type="application/merge-patch+json",
    )
    code, body, _ = await http.request("POST", "/api/v1/namespaces/default/bindings", binding)
    assert code in (201, 409)
    code, body, _ = await http.request("POST", f"{PODS}/gated/binding", binding)
    assert code == 409 and "is already assigned to node" in body["message"]


async def test_bound_pod_spec_is_immutable_except_allowed_fields(http: Http) -> None:
    await http.request("POST", PODS, pod("run", nodeName="gpu-0"))
    code, body, _ = await http.request(
        "PATCH",
        f"{PODS}/run",
        {"spec": {"nodeName": "gpu-1"}},
        content_type="application/merge-patch+json",
    )
    assert code == 422 and body["message"].startswith(
        'Pod "run" is invalid: spec: Forbidden: pod updates may not change fields other than'
    )
    toleration = {
        "spec": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}
    }
    code, body, _ = await http.request(
        "PATCH", f"{PODS}/run", toleration, content_type="application/strategic-merge-patch+json"
    )
    assert code == 200


async def test_deleting_a_bound_pod_is_graceful_and_finished_by_the_kubelet(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", PODS, pod("bye", nodeName="gpu-0", terminationGracePeriodSeconds=5))
    code, body, _ = await http.request("DELETE", f"{PODS}/bye")
    assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 5
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "bye") is None)
