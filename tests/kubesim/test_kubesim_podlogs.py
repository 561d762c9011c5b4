"""`GET pods/{name}/log`: text/plain from the simulated kubelets, with the real server's errors."""

from __future__ import annotations

import asyncio
from typing import Any

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"
LOG = "sim.gangq.dev/log"


def _status(cluster: Emulator, name: str) -> dict[str, Any]:
    found = cluster.registry.storage.get("/pods", "default", name)
    assert found is not None
    return dict(found.get("status") or {})


def _running(cluster: Emulator, name: str) -> bool:
    return _status(cluster, name).get("phase") == "Running"


async def test_log_is_plain_text_written_by_the_container(cluster: Emulator, http: Http) -> None:
    body = pod("writer")
    body["metadata"]["annotations"] = {LOG: "epoch 1 loss 2.5\nepoch 2 loss 1.9\nepoch 3 loss 1.2"}
    await http.request("POST", PODS, body)
    await wait_until(lambda: _running(cluster, "writer"))
    code, text, headers = await http.request("GET", f"{PODS}/writer/log")
    assert code == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert text == "epoch 1 loss 2.5\nepoch 2 loss 1.9\nepoch 3 loss 1.2\n"
    code, text, _ = await http.request("GET", f"{PODS}/writer/log", params={"tailLines": "2"})
    assert (code, text) == (200, "epoch 2 loss 1.9\nepoch 3 loss 1.2\n")
    code, text, _ = await http.request("GET", f"{PODS}/writer/log", params={"tailLines": "0"})
    assert (code, text) == (200, "")


async def test_without_an_annotation_the_container_names_its_command(
    cluster: Emulator, http: Http
) -> None:
    body = pod("cmd")
    body["spec"]["containers"][0] |= {"command": ["torchrun"], "args": ["train.py", "--bf16"]}
    await http.request("POST", PODS, body)
    await wait_until(lambda: _running(cluster, "cmd"))
    code, text, _ = await http.request("GET", f"{PODS}/cmd/log")
    assert (code, text) == (200, "main: started torchrun train.py --bf16\n")


async def test_errors_are_the_real_servers(cluster: Emulator, http: Http) -> None:
    two = pod("two")
    two["spec"]["containers"].append(dict(two["spec"]["containers"][0], name="sidecar"))
    two["spec"]["initContainers"] = [dict(two["spec"]["containers"][0], name="setup")]
    await http.request("POST", PODS, two)
    await http.request("POST", PODS, pod("gated", gates=("gangq.dev/gang",)))
    await wait_until(lambda: _running(cluster, "two"))

    code, body, _ = await http.request("GET", f"{PODS}/missing/log")
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'pods "missing" not found')
    code, body, _ = await http.request("GET", f"{PODS}/two/log")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        "a container name must be specified for pod two, choose one of: [setup main sidecar]"
    )
    code, body, _ = await http.request("GET", f"{PODS}/two/log", params={"container": "nope"})
    assert (code, body["message"]) == (400, "container nope is not valid for pod two")
    code, text, _ = await http.request("GET", f"{PODS}/two/log", params={"container": "sidecar"})
    assert (code, text) == (200, "sidecar: started registry.invalid/x:1\n")
    code, body, _ = await http.request(
        "GET", f"{PODS}/two/log", params={"container": "main", "previous": "true"}
    )
    assert (code, body["message"]) == (
        400,
        'previous terminated container "main" in pod "two" not found',
    )
    code, body, _ = await http.request(
        "GET", f"{PODS}/two/log", params={"container": "main", "tailLines": "-1"}
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'PodLogOptions "two" is invalid: tailLines: Invalid value: -1: '
        "must be greater than or equal to 0"
    )
    # Not scheduled yet: no kubelet to ask, the server streams nothing.
    code, text, _ = await http.request("GET", f"{PODS}/gated/log")
    assert (code, text) == (200, "")


async def test_a_restart_in_place_keeps_the_previous_run(cluster: Emulator, http: Http) -> None:
    body = pod("again", restartPolicy="OnFailure")
    body["metadata"]["annotations"] = {
        LOG: "run {restart} of {container}",
        "sim.gangq.dev/run-seconds": "0.2",
        "sim.gangq.dev/exit-code": "1",
    }
    await http.request("POST", PODS, body)

    def restarts() -> int:
        statuses = _status(cluster, "again").get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0))

    await wait_until(lambda: restarts() >= 1)
    # The next run succeeds, so the pod ends and its runs hold still for the reads.
    await http.request(
        "PATCH",
        f"{PODS}/again",
        {"metadata": {"annotations": {"sim.gangq.dev/exit-code": "0"}}},
        content_type="application/merge-patch+json",
    )
    await wait_until(lambda: _status(cluster, "again").get("phase") == "Succeeded")
    count = restarts()
    current = await http.request("GET", f"{PODS}/again/log")
    previous = await http.request("GET", f"{PODS}/again/log", params={"previous": "true"})
    assert current[:2] == (200, f"run {count} of main\n")
    assert previous[:2] == (200, f"run {count - 1} of main\n")


async def test_a_deleted_pod_takes_its_log_along(cluster: Emulator, http: Http) -> None:
    await http.request("POST", PODS, pod("gone"))
    await wait_until(lambda: _running(cluster, "gone"))
    await http.request("DELETE", f"{PODS}/gone", params={"gracePeriodSeconds": "0"})
    await wait_until(lambda: cluster.registry.storage.get("/pods", "default", "gone") is None)
    await http.request("POST", PODS, pod("gone"))
    await wait_until(lambda: _running(cluster, "gone"))
    code, body, _ = await http.request("GET", f"{PODS}/gone/log", params={"previous": "true"})
    assert (code, body["message"]) == (
        400,
        'previous terminated container "main" in pod "gone" not found',
    )


async def test_a_running_container_sees_its_downward_api_files_change_without_a_restart(
    cluster: Emulator, http: Http
) -> None:
    """As a kubelet refreshes a downwardAPI volume of `metadata.annotations` within its sync:
    the container mounting it goes on running and logs what changed; one that does not mount
    it sees nothing."""
    body = pod("elastic")
    body["metadata"]["annotations"] = {"gangq.dev/size": "4", "kept": "1", "asked": "now"}
    body["spec"]["volumes"] = [
        {
            "name": "podinfo",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        }
    ]
    main = body["spec"]["containers"][0]
    main["volumeMounts"] = [{"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": True}]
    body["spec"]["containers"].append({**main, "name": "side", "volumeMounts": []})
    await http.request("POST", PODS, body)
    await wait_until(lambda: _running(cluster, "elastic"))
    before = _status(cluster, "elastic")["containerStatuses"]
    patch = {"metadata": {"annotations": {"gangq.dev/size": "2", "asked": None}}}
    code, _, _ = await http.request(
        "PATCH", f"{PODS}/elastic", patch, content_type="application/merge-patch+json"
    )
    assert code == 200
    changed = ["podinfo/annotations: gangq.dev/size=2", "podinfo/annotations: asked removed"]

    async def log(container: str) -> list[str]:
        _, text, _ = await http.request(
            "GET", f"{PODS}/elastic/log", params={"container": container}
        )
        return str(text).splitlines()

    for _ in range(100):
        if (await log("main"))[-2:] == changed:
            break
        await asyncio.sleep(0.02)
    assert (await log("main"))[-2:] == changed
    assert not any(line.startswith("podinfo/") for line in await log("side"))
    after = _status(cluster, "elastic")["containerStatuses"]
    assert [c["restartCount"] for c in after] == [c["restartCount"] for c in before] == [0, 0]
    assert [c["containerID"] for c in after] == [c["containerID"] for c in before]
