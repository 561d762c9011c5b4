"""Issue item 3: resourceVersion conflicts, watches from a version, expiry, bookmarks,
selectors and pagination."""

from __future__ import annotations

import json

from kubernetes_asyncio import client

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"


async def _pods(http: Http, count: int, **labels: str) -> None:
    for index in range(count):
        body = pod(f"p-{index}")
        body["metadata"]["labels"] = {"idx": str(index), **labels}
        body["spec"]["nodeName"] = "gpu-0" if index % 2 == 0 else "gpu-1"
        await http.request("POST", PODS, body)


async def test_every_write_takes_a_higher_resource_version_and_stale_writes_conflict(
    http: Http,
) -> None:
    _, first, _ = await http.request("POST", PODS, pod("a"))
    _, second, _ = await http.request(
        "PATCH",
        f"{PODS}/a",
        {"metadata": {"labels": {"x": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    code, body, _ = await http.request("PUT", f"{PODS}/a", first)
    assert (code, body["reason"]) == (409, "Conflict")
    assert (
        body["message"]
        == 'Operation cannot be fulfilled on pods "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    stale_patch = {
        "metadata": {"resourceVersion": first["metadata"]["resourceVersion"], "labels": {"y": "2"}}
    }
    code, _, _ = await http.request(
        "PATCH", f"{PODS}/a", stale_patch, content_type="application/merge-patch+json"
    )
    assert code == 409
    test_op = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": first["metadata"]["resourceVersion"],
        }
    ]
    code, body, _ = await http.request(
        "PATCH", f"{PODS}/a", test_op, content_type="application/json-patch+json"
    )
    assert (code, body["message"], body["details"]) == (
        422,
        "the server rejected our request due to an error in our request",
        {},
    )


async def test_watch_from_a_resource_version_replays_later_events(http: Http) -> None:
    _, listed, _ = await http.request("GET", PODS)
    await http.request("POST", PODS, pod("w", gates=("gangq.dev/admission",)))
    await http.request("DELETE", f"{PODS}/w")
    events = await http.watch(
        PODS, {"resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": "1"}
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0


async def test_too_old_resource_version_is_one_error_event_on_watch_and_410_on_exact_list(
    cluster: Emulator, http: Http
) -> None:
    await http.request("POST", PODS, pod("old"))
    cluster.registry.storage.compact()
    events = await http.watch(PODS, {"resourceVersion": "1", "timeoutSeconds": "5"})
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    error = events[0]["object"]
    assert (error["code"], error["reason"]) == (410, "Expired")
    assert error["message"].startswith("too old resource version: 1 (")
    code, body, _ = await http.request(
        "GET", PODS, params={"resourceVersion": "1", "resourceVersionMatch": "Exact"}
    )
    assert (code, body["message"]) == (410, "The resourceVersion for the provided list is too old.")


async def test_bookmarks_close_the_initial_events_and_precede_the_deadline(http: Http) -> None:
    await http.request("POST", PODS, pod("b", gates=("gangq.dev/admission",)))
    events = await http.watch(
        PODS,
        {
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "3",
        },
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert events[2]["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": events[1]["object"]["metadata"]["resourceVersion"]},
        "spec": {"containers": None},
        "status": {},
    }


async def test_a_selector_watch_sees_leaving_as_deleted_and_entering_as_added(http: Http) -> None:
    _, listed, _ = await http.request("GET", PODS)
    body = pod("s", gates=("gangq.dev/admission",))
    body["metadata"]["labels"] = {"sel": "in"}
    await http.request("POST", PODS, body)
    for value in ("out", "in"):
        await http.request(
            "PATCH",
            f"{PODS}/s",
            {"metadata": {"labels": {"sel": value}}},
            content_type="application/merge-patch+json",
        )
    events = await http.watch(
        PODS,
        {
            "resourceVersion": listed["metadata"]["resourceVersion"],
            "labelSelector": "sel=in",
            "timeoutSeconds": "1",
        },
    )
    assert [(e["type"], e["object"]["metadata"]["labels"]["sel"]) for e in events] == [
        ("ADDED", "in"),
        ("DELETED", "out"),
        ("ADDED", "in"),
    ]


async def test_label_and_field_selectors(api: client.ApiClient, http: Http) -> None:
    await _pods(http, 4, app="list")
    core = client.CoreV1Api(api)
    names = lambda result: [p.metadata.name for p in result.items]  # noqa: E731
    assert names(
        await core.list_namespaced_pod("default", label_selector="app=list,idx in (1,3)")
    ) == ["p-1", "p-3"]
    assert names(
        await core.list_namespaced_pod("default", label_selector="idx,!none,idx notin (0)")
    ) == ["p-1", "p-2", "p-3"]
    assert names(
        await core.list_namespaced_pod("default", field_selector="spec.nodeName=gpu-0")
    ) == ["p-0", "p-2"]
    assert names(
        await core.list_pod_for_all_namespaces(
            field_selector="metadata.name=p-3,metadata.namespace=default"
        )
    ) == ["p-3"]
    code, body, _ = await http.request(
        "GET", PODS, params={"fieldSelector": "spec.containers.image=x"}
    )
    assert (code, body["message"]) == (400, "field label not supported: spec.containers.image")
    code, body, _ = await http.request("GET", PODS, params={"labelSelector": "app in (list"})
    assert (code, body["message"]) == (
        400,
        "unable to parse requirement: found '', expected: ',' or ')'",
    )


async def test_pods_phase_field_selector(
    cluster: Emulator, api: client.ApiClient, http: Http
) -> None:
    await _pods(http, 2)
    await http.request("POST", PODS, pod("held", gates=("gangq.dev/admission",)))
    core = client.CoreV1Api(api)
    phases = lambda: [p["status"]["phase"] for p in cluster.registry.storage.items("/pods")]  # noqa: E731
    await wait_until(lambda: phases().count("Running") == 2)
    running = await core.list_namespaced_pod("default", field_selector="status.phase=Running")
    pending = await core.list_namespaced_pod("default", field_selector="status.phase!=Running")
    assert sorted(p.metadata.name for p in running.items) == ["p-0", "p-1"]
    assert [p.metadata.name for p in pending.items] == ["held"]


async def test_limit_and_continue_page_through_a_list(http: Http) -> None:
    await _pods(http, 5)
    _, first, _ = await http.request("GET", PODS, params={"limit": "2"})
    assert [p["metadata"]["name"] for p in first["items"]] == ["p-0", "p-1"]
    assert first["metadata"]["remainingItemCount"] == 3
    _, second, _ = await http.request(
        "GET", PODS, params={"limit": "2", "continue": first["metadata"]["continue"]}
    )
    _, last, _ = await http.request(
        "GET", PODS, params={"limit": "2", "continue": second["metadata"]["continue"]}
    )
    assert [p["metadata"]["name"] for p in second["items"] + last["items"]] == ["p-2", "p-3", "p-4"]
    assert "continue" not in last["metadata"] and "remainingItemCount" not in last["metadata"]
    _, everything, _ = await http.request(
        "GET", PODS, params={"limit": "2", "resourceVersion": "0"}
    )
    assert len(everything["items"]) == 5
    code, body, _ = await http.request(
        "GET", PODS, params={"limit": "2", "continue": "not-a-valid-token"}
    )
    assert code == 400 and body["message"].startswith("invalid continue token")


async def test_events_already_waiting_reach_the_client_in_one_write(
    cluster: Emulator, http: Http
) -> None:
    """kube-apiserver flushes a watch only once its channel is empty: a burst of writes
    reaches a watcher in one piece, not one chunk per event."""
    _, listed, _ = await http.request("GET", PODS)
    query = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    async with http.session.get(http.base + PODS, params=query) as response:
        await wait_until(cluster.registry.storage.subscriptions)
        for index in range(10):
            cluster.registry.create(
                cluster.registry.types["/pods"], "default", pod(f"burst-{index}")
            )
        received, chunks = b"", 0
        async for data, chunk_ended in response.content.iter_chunks():
            received += data
            chunks += chunk_ended
            if received.count(b"\n") == 10:
                break
    names = [json.loads(line)["object"]["metadata"]["name"] for line in received.splitlines()]
    assert names == [f"burst-{index}" for index in range(10)]
    assert chunks == 1
