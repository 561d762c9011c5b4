"""Issue item 9: simulated kubelets run pods to completion; node and device failures."""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"


def _pod(cluster: Emulator, name: str) -> dict[str, Any]:
    found = cluster.registry.storage.get("/pods", "default", name)
    assert found is not None
    return found


async def test_pods_finish_with_the_exit_code_their_annotations_ask_for(
    cluster: Emulator, http: Http
) -> None:
    for name, code in (("ok", "0"), ("crash", "3")):
        body = pod(name, restartPolicy="Never")
        body["metadata"]["annotations"] = {
            "sim.gangq.dev/run-seconds": "0.05",
            "sim.gangq.dev/exit-code": code,
        }
        await http.request("POST", PODS, body)
    await wait_until(lambda: _pod(cluster, "ok")["status"]["phase"] == "Succeeded")
    await wait_until(lambda: _pod(cluster, "crash")["status"]["phase"] == "Failed")
    terminated = _pod(cluster, "crash")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")


async def test_restart_policy_restarts_failed_containers_in_place(
    cluster: Emulator, http: Http
) -> None:
    body = pod("again", restartPolicy="OnFailure")
    body["metadata"]["annotations"] = {
        "sim.gangq.dev/run-seconds": "0.02",
        "sim.gangq.dev/exit-code": "1",
    }
    await http.request("POST", PODS, body)

    def restarts() -> int:
        statuses = _pod(cluster, "again")["status"].get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0))

    await wait_until(lambda: restarts() >= 2)
    status = _pod(cluster, "again")["status"]
    assert status["phase"] == "Running"
    assert status["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1


async def test_ready_delay_keeps_a_bound_pod_pending_first() -> None:
    async with Emulator(ready_seconds=0.2) as cluster:
        cluster.registry.create(
            cluster.registry.types["/pods"], "default", pod("slow", nodeName="gpu-0")
        )
        assert _pod(cluster, "slow")["status"]["phase"] == "Pending"
        await wait_until(lambda: _pod(cluster, "slow")["status"]["phase"] == "Running")


async def test_a_failed_node_goes_not_ready_and_its_pods_lose_ready(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", PODS, pod("victim", nodeName="gpu-1"))
    await wait_until(lambda: _pod(cluster, "victim")["status"]["phase"] == "Running")
    cluster.kubelets.fail_node("gpu-1")
    _, node, _ = await http.request("GET", "/api/v1/nodes/gpu-1")
    # As the node lifecycle controller taints a node whose Ready condition is Unknown.
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    ]
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "Unknown"
    conditions = {c["type"]: c["status"] for c in _pod(cluster, "victim")["status"]["conditions"]}
    assert conditions["Ready"] == "False"
    await http.request("POST", PODS, pod("after"))
    bound = await wait_until(lambda: _pod(cluster, "after")["spec"].get("nodeName"))
    assert bound == "gpu-0"


async def test_device_taints_are_published_and_keep_new_claims_off(
    cluster: Emulator, http: Http
) -> None:
    cluster.kubelets.taint_device("gpu-0", "gpu-0", effect="NoSchedule")
    _, slices, _ = await http.request(
        "GET",
        "/apis/resource.k8s.io/v1/resourceslices",
        params={"fieldSelector": "spec.nodeName=gpu-0"},
    )
    tainted = [d for d in slices["items"][0]["spec"]["devices"] if d.get("taints")]
    assert [d["name"] for d in tainted] == ["gpu-0"]
