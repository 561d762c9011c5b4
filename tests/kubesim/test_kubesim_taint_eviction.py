"""The taint eviction controller: pods leave a node tainted NoExecute as kube-controller-manager
makes them (pkg/controller/tainteviction): a DisruptionTarget condition, an event, a deletion."""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim.emulator import Emulator
from gangq.queue.kubesim.storage import Event

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"
MAINTENANCE = {"key": "gpu-maintenance", "value": "true", "effect": "NoExecute"}


def _seen_pods(cluster: Emulator) -> dict[str, list[dict[str, Any]]]:
    """Every committed version of every pod, by name (a deleted pod's last words stay)."""
    seen: dict[str, list[dict[str, Any]]] = {}

    def record(event: Event) -> None:
        if event.resource == "/pods":
            seen.setdefault(event.object["metadata"]["name"], []).append(event.object)

    cluster.registry.storage.listeners.append(record)
    return seen


async def _taint(http: Http, node: str, taint: dict[str, str]) -> None:
    """`kubectl taint nodes NODE key=value:Effect`: a strategic merge patch of spec.taints."""
    status, body, _ = await http.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": [taint]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 200, body


async def test_an_untolerated_no_execute_taint_evicts_as_upstream(
    cluster: Emulator, http: Http
) -> None:
    seen = _seen_pods(cluster)
    await http.request("POST", PODS, pod("victim", nodeName="gpu-1"))
    tolerating = {"key": "gpu-maintenance", "operator": "Exists", "effect": "NoExecute"}
    await http.request("POST", PODS, pod("tolerant", nodeName="gpu-1", tolerations=[tolerating]))
    await http.request("POST", PODS, pod("elsewhere", nodeName="gpu-0"))
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "victim"))
    await _taint(http, "gpu-1", MAINTENANCE)
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "victim") is None)
    marked = [
        c
        for version in seen["victim"]
        for c in version["status"].get("conditions") or []
        if c["type"] == "DisruptionTarget"
    ]
    assert marked and {(c["status"], c["reason"], c["message"]) for c in marked} == {
        ("True", "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
    }
    events = [
        e
        for e in cluster.registry.storage.items("/events")
        if e["involvedObject"].get("name") == "victim" and e["reason"] == "TaintManagerEviction"
    ]
    assert [(e["type"], e["message"], e["source"]["component"]) for e in events] == [
        ("Normal", "Marking for deletion Pod default/victim", "taint-eviction-controller")
    ]
    assert cluster.registry.storage.get("/pods", "default", "tolerant") is not None
    assert cluster.registry.storage.get("/pods", "default", "elsewhere") is not None


async def test_toleration_seconds_delay_the_eviction(cluster: Emulator, http: Http) -> None:
    bounded = {
        "key": "gpu-maintenance",
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
        "tolerationSeconds": 1,
    }
    await http.request("POST", PODS, pod("patient", nodeName="gpu-1", tolerations=[bounded]))
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "patient"))
    started = cluster.registry.clock()
    await _taint(http, "gpu-1", MAINTENANCE)
    await wait_until(
        lambda: cluster.registry.storage.get("/pods", "default", "patient") is None, seconds=5.0
    )
    assert (cluster.registry.clock() - started).total_seconds() >= 1.0


async def test_a_failed_node_keeps_its_pods_for_their_default_toleration(
    cluster: Emulator, http: Http
) -> None:
    """Every pod tolerates `node.kubernetes.io/unreachable` for 300 s (DefaultTolerationSeconds):
    the eviction is scheduled, not done at once."""
    await http.request("POST", PODS, pod("stays", nodeName="gpu-1"))
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "stays"))
    cluster.kubelets.fail_node("gpu-1")
    await wait_until(lambda: cluster.node_taints.next_eviction is not None)
    assert cluster.registry.storage.get("/pods", "default", "stays") is not None
    left = (cluster.node_taints.next_eviction - cluster.registry.clock()).total_seconds()
    assert 290 < left <= 300
