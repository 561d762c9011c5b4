"""Issue item 8 (scheduler filters): CPU/memory/pod-count fit, taints, nodeSelector, affinity."""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"


def _node_of(cluster: Emulator, name: str) -> Any:
    return (
        (cluster.registry.storage.get("/pods", "default", name) or {})
        .get("spec", {})
        .get("nodeName")
    )


async def test_a_pod_that_fits_nowhere_stays_pending_with_the_reason(
    cluster: Emulator, http: Http
) -> None:
    body = pod("huge")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500"}}
    await http.request("POST", PODS, body)
    reason = await wait_until(lambda: cluster.scheduler.reasons.get("default/huge"))
    assert reason == (
        "0/2 nodes are available: 2 Insufficient cpu. still not schedulable, preemption: "
        "0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    _, events, _ = await http.request(
        "GET",
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": "involvedObject.name=huge"},
    )
    assert [e["reason"] for e in events["items"]] == ["FailedScheduling"]


async def test_taints_keep_untolerating_pods_off(cluster: Emulator, http: Http) -> None:
    taint = {
        "spec": {
            "taints": [{"key": "gangq.dev/maintenance", "value": "yes", "effect": "NoSchedule"}]
        }
    }
    await http.request("PATCH", "/api/v1/nodes/gpu-0", taint, content_type=MERGE)
    for index in range(3):
        await http.request("POST", PODS, pod(f"plain-{index}"))
    await wait_until(lambda: all(_node_of(cluster, f"plain-{i}") for i in range(3)))
    assert {_node_of(cluster, f"plain-{i}") for i in range(3)} == {"gpu-1"}
    tolerant = pod("tolerant", tolerations=[{"key": "gangq.dev/maintenance", "operator": "Exists"}])
    await http.request("POST", PODS, tolerant)
    assert await wait_until(lambda: _node_of(cluster, "tolerant")) == "gpu-0"


async def test_node_selector_and_required_affinity(cluster: Emulator, http: Http) -> None:
    await http.request("POST", PODS, pod("by-rack", nodeSelector={"gangq.dev/rack": "rack-1"}))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": ["gpu-1"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    await http.request("POST", PODS, pod("by-affinity", affinity=affinity))
    assert await wait_until(lambda: _node_of(cluster, "by-rack")) == "gpu-1"
    assert await wait_until(lambda: _node_of(cluster, "by-affinity")) == "gpu-0"


async def test_pod_count_is_a_limit(cluster: Emulator, http: Http) -> None:
    for node in ("gpu-0", "gpu-1"):
        current = cluster.registry.storage.get("/nodes", "", node)
        assert current is not None
        current["status"]["allocatable"]["pods"] = "1"
        await http.request("PUT", f"/api/v1/nodes/{node}/status", current)
    for index in range(3):
        await http.request("POST", PODS, pod(f"slot-{index}"))
    reason = await wait_until(lambda: cluster.scheduler.reasons.get("default/slot-2"))
    assert reason == (
        "0/2 nodes are available: 2 Too many pods. still not schedulable, preemption: "
        "0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    assert {_node_of(cluster, "slot-0"), _node_of(cluster, "slot-1")} == {"gpu-0", "gpu-1"}
