"""Issue item 8: ResourceClaim allocation validation and the DRA-aware scheduler."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, claim, pod, wait_until

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"
NUMA_1 = 'device.attributes["gpu.nvidia.com"].numa == 1'


def _allocation(
    *devices: str, node: str = "gpu-0", request: str = "gpus", timestamp: bool = True
) -> dict[str, Any]:
    allocation: dict[str, Any] = {
        "devices": {
            "results": [
                {"request": request, "driver": "gpu.nvidia.com", "pool": node, "device": d}
                for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    if timestamp:
        allocation["allocationTimestamp"] = "2026-01-01T00:00:00Z"
    return {"status": {"allocation": allocation}}


def _claim(cluster: Emulator, name: str) -> dict[str, Any]:
    found = cluster.registry.storage.get("resource.k8s.io/resourceclaims", "default", name)
    assert found is not None
    return found


async def test_allocation_is_validated_structurally_and_immutable(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", CLAIMS, claim("c", count=2))
    code, body, _ = await http.request(
        "PATCH", f"{CLAIMS}/c/status", _allocation("gpu-0", request="nope"), content_type=MERGE
    )
    assert (
        code == 422
        and body["details"]["causes"][0]["field"] == "status.allocation.devices.results[0].request"
    )
    code, body, _ = await http.request(
        "PATCH", f"{CLAIMS}/c/status", _allocation("GPU_0!"), content_type=MERGE
    )
    assert (
        code == 422
        and body["details"]["causes"][0]["field"] == "status.allocation.devices.results[0].device"
    )
    reserve = {"status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]}}
    code, body, _ = await http.request("PATCH", f"{CLAIMS}/c/status", reserve, content_type=MERGE)
    assert (
        body["message"]
        == 'ResourceClaim.resource.k8s.io "c" is invalid: status.reservedFor: Forbidden: '
        "may not be specified when `allocated` is not set"
    )
    code, _, _ = await http.request(
        "PATCH", f"{CLAIMS}/c/status", _allocation("gpu-0", "gpu-1"), content_type=MERGE
    )
    assert code == 200
    code, body, _ = await http.request(
        "PATCH", f"{CLAIMS}/c/status", _allocation("gpu-0", "gpu-2"), content_type=MERGE
    )
    assert code == 422 and body["message"].endswith("field is immutable")
    code, _, _ = await http.request(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"allocation": None}}, content_type=MERGE
    )
    assert code == 200
    code, body, _ = await http.request(
        "PUT", f"{CLAIMS}/c", dict(_claim(cluster, "c"), spec=claim("c", count=3)["spec"])
    )
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec"


async def test_devices_nobody_publishes_are_accepted_and_recorded(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", CLAIMS, claim("ghost"))
    code, _, _ = await http.request(
        "PATCH", f"{CLAIMS}/ghost/status", _allocation("gpu-99"), content_type=MERGE
    )
    assert code == 200
    recorded = [(p.claim, p.device) for p in cluster.phantom_allocations]
    assert recorded == [("default/ghost", "gpu-99")]
    published = {
        "metadata": {"name": "late-slice"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "gpu-0", "generation": 2, "resourceSliceCount": 1},
            "nodeName": "gpu-0",
            "devices": [{"name": "gpu-98"}],
        },
    }
    code, _, _ = await http.request("POST", "/apis/resource.k8s.io/v1/resourceslices", published)
    assert code == 201
    await http.request("POST", CLAIMS, claim("late"))
    await http.request("PATCH", f"{CLAIMS}/late/status", _allocation("gpu-98"), content_type=MERGE)
    # A slice published after the first check counts: the device is no phantom.
    assert [(p.claim, p.device) for p in cluster.phantom_allocations] == recorded


async def test_claim_validation_on_create(http: Http) -> None:
    code, body, _ = await http.request(
        "POST", CLAIMS, claim("bad-cel", selectors=('device.attributes["x"].numa ==',))
    )
    assert code == 422 and "compilation failed" in body["details"]["causes"][0]["message"]
    negative = claim("neg")
    negative["spec"]["devices"]["requests"][0]["exactly"]["count"] = -1
    code, body, _ = await http.request("POST", CLAIMS, negative)
    assert (
        body["message"] == 'ResourceClaim.resource.k8s.io "neg" is invalid: '
        "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"
    )
    zero = claim("zero")
    zero["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    _, created, _ = await http.request("POST", CLAIMS, zero)
    assert created["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


async def test_scheduler_allocates_reserves_and_the_claim_is_released_after_the_pod(
    cluster: Emulator, api: client.ApiClient
) -> None:
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    await resource.create_namespaced_resource_claim(
        "default", claim("numa", count=4, selectors=(NUMA_1,), numa=True)
    )
    await core.create_namespaced_pod("default", pod("user", claims=("numa",)))
    allocated = await wait_until(
        lambda: (
            (_claim(cluster, "numa").get("status") or {}).get("reservedFor")
            and _claim(cluster, "numa")
        )
    )
    devices = [r["device"] for r in allocated["status"]["allocation"]["devices"]["results"]]
    assert devices == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert allocated["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    node = cluster.registry.storage.get("/pods", "default", "user")["spec"]["nodeName"]
    assert allocated["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][
        0
    ]["values"] == [node]
    await core.delete_namespaced_pod("user", "default", grace_period_seconds=0)
    released = await wait_until(
        lambda: not (_claim(cluster, "numa").get("status") or {}) and _claim(cluster, "numa")
    )
    assert "finalizers" not in released["metadata"]


async def test_a_device_is_never_given_to_two_claims(
    cluster: Emulator, api: client.ApiClient
) -> None:
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    for index in range(3):
        await resource.create_namespaced_resource_claim("default", claim(f"big-{index}", count=8))
        await core.create_namespaced_pod("default", pod(f"big-{index}", claims=(f"big-{index}",)))
    await wait_until(
        lambda: (
            sum(
                1
                for i in range(3)
                if (_claim(cluster, f"big-{i}").get("status") or {}).get("allocation")
            )
            == 2
        )
    )
    cluster.scheduler.cycle()
    held = [
        (r["pool"], r["device"])
        for i in range(3)
        for r in ((_claim(cluster, f"big-{i}").get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
    ]
    assert len(held) == len(set(held)) == 16
    assert "cannot allocate all claims" in cluster.scheduler.reasons["default/big-2"]


async def test_pre_allocated_claim_pins_the_pod_to_its_node(cluster: Emulator, http: Http) -> None:
    await http.request("POST", CLAIMS, claim("pinned"))
    await http.request(
        "PATCH", f"{CLAIMS}/pinned/status", _allocation("gpu-3", node="gpu-1"), content_type=MERGE
    )
    await http.request("POST", PODS, pod("pinned", claims=("pinned",)))
    bound = await wait_until(
        lambda: cluster.registry.storage.get("/pods", "default", "pinned")["spec"].get("nodeName")
    )
    assert bound == "gpu-1"
    assert "finalizers" not in _claim(cluster, "pinned")["metadata"]


async def test_allocation_without_timestamp_is_never_bound(cluster: Emulator, http: Http) -> None:
    await http.request("POST", CLAIMS, claim("no-time"))
    await http.request(
        "PATCH",
        f"{CLAIMS}/no-time/status",
        _allocation("gpu-0", timestamp=False),
        content_type=MERGE,
    )
    await http.request("POST", PODS, pod("no-time", claims=("no-time",)))
    reason = await wait_until(lambda: cluster.scheduler.reasons.get("default/no-time"))
    assert "allocationTimestamp" in reason
    assert not cluster.registry.storage.get("/pods", "default", "no-time")["spec"].get("nodeName")


async def test_post_filter_frees_a_claim_pinned_to_a_node_the_pod_cannot_use(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", CLAIMS, claim("moved"))
    await http.request(
        "PATCH", f"{CLAIMS}/moved/status", _allocation("gpu-0", node="gpu-0"), content_type=MERGE
    )
    body = pod("moved", claims=("moved",))
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-1"}
    await http.request("POST", PODS, body)
    bound = await wait_until(
        lambda: cluster.registry.storage.get("/pods", "default", "moved")["spec"].get("nodeName")
    )
    assert bound == "gpu-1"
    assert (
        _claim(cluster, "moved")["status"]["allocation"]["devices"]["results"][0]["pool"] == "gpu-1"
    )


async def test_a_finished_pod_leaves_reserved_for_while_the_pod_stays(
    cluster: Emulator, api: client.ApiClient
) -> None:
    """The resourceclaim controller drops done pods (a terminal phase), not only deleted ones:
    the scheduler-made claim is deallocated while the Succeeded pod is kept for its logs."""
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    await resource.create_namespaced_resource_claim("default", claim("done", count=1))
    body = pod("done", claims=("done",), restartPolicy="Never")
    body["metadata"]["annotations"] = {"sim.gangq.dev/run-seconds": "0.05"}
    await core.create_namespaced_pod("default", body)
    await wait_until(lambda: (_claim(cluster, "done").get("status") or {}).get("reservedFor"))
    released = await wait_until(
        lambda: not (_claim(cluster, "done").get("status") or {}) and _claim(cluster, "done")
    )
    assert "finalizers" not in released["metadata"]
    kept = cluster.registry.storage.get("/pods", "default", "done")
    assert kept is not None and kept["status"]["phase"] == "Succeeded"
