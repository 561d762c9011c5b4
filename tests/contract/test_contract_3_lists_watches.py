"""Corpus section 3: lists (selectors, pagination, resourceVersion rules) and watches."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Case, Replay, assert_same_shape, eventually, load, run

PODS = "/api/v1/namespaces/ref/pods"


def _list_pod(index: int, *, gated: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/none:latest",
                "resources": {"requests": {"cpu": "100m"}},
            }
        ],
        "terminationGracePeriodSeconds": 5,
    }
    if gated:
        spec["schedulingGates"] = [{"name": "gangq.dev/admission"}]
    else:
        spec["nodeName"] = "node-a" if index % 2 == 0 else "node-b"
    name = "list-gated" if gated else f"list-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "list", "idx": str(index)}},
        "spec": spec,
    }


async def _list_pods(reference: Replay) -> None:
    """The six pods every section-3 list was taken over (list-0..4 Running, list-gated Pending)."""
    for index in range(5):
        await reference.call("POST", PODS, _list_pod(index))
    await reference.call("POST", PODS, _list_pod(5, gated=True))
    for index in range(5):
        await _mark_running(reference, f"list-{index}")


async def _mark_running(reference: Replay, name: str) -> None:
    """Report the pod Running as its kubelet will (sooner, to keep the replay quick)."""
    current = (await reference.call("GET", f"{PODS}/{name}")).body
    current["status"]["phase"] = "Running"
    del current["metadata"]["resourceVersion"]  # unconditional: the kubelet may write meanwhile
    reply = await reference.call("PUT", f"{PODS}/{name}/status", current)
    assert reply.status == 200, reply.body


async def _compact(reference: Replay) -> None:
    reference.cluster.registry.storage.compact()


async def _our_page_one(reference: Replay, request: dict[str, Any]) -> None:
    """A continue token of this run's first page, made stale by a compaction (3-37)."""
    first = await reference.call("GET", PODS, query={"limit": "2"})
    await reference.call("POST", PODS, _list_pod(9, gated=True) | {"metadata": {"name": "late"}})
    reference.cluster.registry.storage.compact()
    request["query"]["continue"] = first.body["metadata"]["continue"]


async def _too_old(reference: Replay, request: dict[str, Any]) -> None:
    request["query"]["resourceVersion"] = "2"


LISTED = (_list_pods,)
SECTION_3_LISTS = [
    Case("3-01", setup=LISTED),
    Case("3-02", setup=LISTED, names=True, paths=("metadata.remainingItemCount",)),
    Case("3-03", setup=LISTED, names=True, paths=("metadata.remainingItemCount",)),
    Case("3-04", setup=LISTED, names=True),
    Case("3-05", setup=LISTED, message=False),
    Case("3-06", setup=LISTED, names=True),
    Case("3-08", setup=LISTED, names=True),
    Case("3-09", setup=LISTED, names=True),
    Case("3-10", setup=LISTED, names=True),
    Case("3-11", setup=LISTED, names=True),
    Case("3-12", setup=LISTED, names=True),
    Case("3-13", setup=LISTED, names=True),
    Case("3-14", setup=LISTED, names=True),
    Case("3-15", setup=LISTED, names=True),
    Case("3-16", setup=LISTED, names=True),
    Case("3-17", setup=LISTED),
    Case("3-18", setup=LISTED, names=True),
    Case("3-19", setup=(*LISTED, _compact)),
    Case("3-20", setup=LISTED, names=True),
    Case("3-21"),
    Case("3-22", setup=LISTED, paths=("rows.0.cells.0", "rows.5.cells.0")),
    Case("3-29"),
    Case("3-32", message=False),
    Case("3-34", setup=LISTED),
    Case("3-35", setup=LISTED),
    Case("3-36", setup=LISTED, names=True),
    Case("3-37", setup=LISTED, rewrite=_our_page_one, message=False),
]


@pytest.mark.parametrize("case", SECTION_3_LISTS, ids=str)
async def test_section_3_lists(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_3_continue_with_resource_version_0(reference: Replay) -> None:
    """3-07: limit is ignored with resourceVersion=0, the continue token too."""
    await _list_pods(reference)
    reply = await reference.replay("3-07")
    expected = load("3-07")["response"]
    assert reply.status == expected["status"]
    assert "continue" not in reply.body["metadata"]
    ours = {f"list-{i}" for i in range(5)} | {"list-gated"}
    listed = [
        p["metadata"]["name"] for p in expected["body"]["items"] if p["metadata"]["name"] in ours
    ]
    assert [p["metadata"]["name"] for p in reply.body["items"]] == listed


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


async def _watch(
    reference: Replay, name: str, *, seconds: str, **query: str
) -> list[dict[str, Any]]:
    request = load(name)["request"]
    request = request | {"query": dict(request["query"], timeoutSeconds=seconds, **query)}
    reply = await reference.send(request)
    assert reply.status == load(name)["response"]["status"]
    return list(reply.body)


async def _version(reference: Replay) -> str:
    return str((await reference.call("GET", PODS)).body["metadata"]["resourceVersion"])


async def test_section_3_watch_create_modify_delete(reference: Replay) -> None:
    """3-23: ADDED, MODIFIED (label), MODIFIED (deletionTimestamp, grace 0), DELETED, BOOKMARK."""
    since = await _version(reference)
    shown = load("3-23")["response"]["body"][0]["object"]
    await reference.call(
        "POST",
        PODS,
        {
            "metadata": {"name": "w1", "labels": {"app": "watch"}},
            "spec": {
                "containers": [{"name": "main", "image": "x"}],
                "schedulingGates": shown["spec"]["schedulingGates"],
            },
        },
    )
    await reference.call(
        "PATCH",
        f"{PODS}/w1",
        {"metadata": {"labels": {"step": "2"}}},
        content_type="application/merge-patch+json",
    )
    await reference.call("DELETE", f"{PODS}/w1")
    events = await _watch(reference, "3-23", seconds="2", resourceVersion=since)
    assert _types(events) == _types(load("3-23")["response"]["body"])
    assert events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0


async def test_section_3_watch_bound_pod_lifecycle(reference: Replay) -> None:
    """3-24: a bound pod: ADDED, Running, graceful delete, kubelet stop, DELETED, BOOKMARK."""
    since = await _version(reference)
    await reference.call(
        "POST",
        PODS,
        {
            "metadata": {"name": "w2", "labels": {"app": "watch"}},
            "spec": {
                "containers": [{"name": "main", "image": "x"}],
                "nodeName": "node-a",
                "terminationGracePeriodSeconds": 5,
            },
        },
    )
    storage = reference.cluster.registry.storage
    await eventually(
        lambda: (storage.get("/pods", "ref", "w2") or {})["status"]["phase"] == "Running"
    )
    await reference.call("DELETE", f"{PODS}/w2")
    await eventually(lambda: storage.get("/pods", "ref", "w2") is None)
    events = await _watch(reference, "3-24", seconds="2", resourceVersion=since)
    assert _types(events) == _types(load("3-24")["response"]["body"])


async def test_section_3_watch_selector_leave_and_enter(reference: Replay) -> None:
    """3-25: leaving the selector is DELETED, entering again is ADDED."""
    await reference.call(
        "POST",
        PODS,
        {
            "metadata": {"name": "w3", "labels": {"app": "watch", "sel": "in"}},
            "spec": {
                "containers": [{"name": "main", "image": "x"}],
                "schedulingGates": [{"name": "gangq.dev/admission"}],
            },
        },
    )
    since = await _version(reference)
    for value in ("out", "in"):
        await reference.call(
            "PATCH",
            f"{PODS}/w3",
            {"metadata": {"labels": {"sel": value}}},
            content_type="application/merge-patch+json",
        )
    events = await _watch(reference, "3-25", seconds="1", resourceVersion=since)
    assert _types(events) == _types(load("3-25")["response"]["body"])


@pytest.mark.parametrize(
    ("name", "seconds"), [("3-26", "1"), ("3-27", "1"), ("3-28", "2"), ("3-33", "2")]
)
async def test_section_3_watch_initial_events(reference: Replay, name: str, seconds: str) -> None:
    await _list_pods(reference)
    events = await _watch(reference, name, seconds=seconds)
    expected = load(name)["response"]["body"]
    assert _types(events) == _types(expected)
    assert [e["object"]["metadata"].get("name") for e in events] == [
        e["object"]["metadata"].get("name") for e in expected
    ]
    assert [e["object"]["metadata"].get("annotations") for e in events] == [
        e["object"]["metadata"].get("annotations") for e in expected
    ]


@pytest.mark.parametrize("name", ["3-30", "3-38"])
async def test_section_3_watch_too_old_is_one_error_event(reference: Replay, name: str) -> None:
    await _list_pods(reference)
    reference.cluster.registry.storage.compact()
    events = await _watch(reference, name, seconds="2", resourceVersion="2")
    expected = load(name)["response"]["body"]
    assert _types(events) == _types(expected) == ["ERROR"]
    ours, theirs = events[0]["object"], expected[0]["object"]
    assert {k: ours.get(k) for k in ("kind", "status", "reason", "code")} == {
        k: theirs.get(k) for k in ("kind", "status", "reason", "code")
    }
    assert ours["message"].split(" (")[0] == theirs["message"].split(" (")[0].replace(
        theirs["message"].split(": ")[1].split(" ")[0], "2"
    )


async def test_section_3_watch_future_version_is_silent(reference: Replay) -> None:
    events = await _watch(reference, "3-31", seconds="1")
    assert events == load("3-31")["response"]["body"] == []


def test_section_3_shape_helper_rejects_a_different_status() -> None:
    expected = load("3-21")
    wrong = type(
        "Reply", (), {"status": 422, "body": load("3-29")["response"]["body"], "headers": {}}
    )()
    with pytest.raises(AssertionError):
        assert_same_shape(Case("3-21"), expected, wrong)


async def test_section_3_pod_table_has_the_captured_columns_and_cells(reference: Replay) -> None:
    """3-22 in full: column definitions as captured; cells but Age, IP and Node as captured
    (the kubelets start the pods here, so their container statuses are the real shape)."""
    for index in range(5):
        await reference.call("POST", PODS, _list_pod(index))
    await reference.call("POST", PODS, _list_pod(5, gated=True))
    storage = reference.cluster.registry.storage

    def started() -> bool:
        pods = [storage.peek("/pods", "ref", f"list-{index}") or {} for index in range(5)]
        statuses = [(p.get("status") or {}).get("containerStatuses") or [{}] for p in pods]
        return all(s[0].get("ready") for s in statuses)

    await eventually(started)
    reply = await reference.replay("3-22")
    expected = load("3-22")["response"]["body"]
    assert reply.body["columnDefinitions"] == expected["columnDefinitions"]

    def stable(row: dict[str, Any]) -> list[Any]:
        return [cell for index, cell in enumerate(row["cells"]) if index not in (4, 5, 6)]

    assert [stable(row) for row in reply.body["rows"]] == [stable(row) for row in expected["rows"]]
