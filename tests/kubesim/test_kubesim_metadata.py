"""Issue item 6: uid, generation, creationTimestamp, finalizers and cascading deletion."""

from __future__ import annotations

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, claim, wait_until

MAPS = "/api/v1/namespaces/default/configmaps"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
MERGE = "application/merge-patch+json"


async def test_server_sets_uid_timestamps_and_bumps_generation_only_on_spec_changes(
    http: Http,
) -> None:
    _, created, _ = await http.request(
        "POST",
        "/apis/resource.k8s.io/v1/deviceclasses",
        {"metadata": {"name": "extra"}, "spec": {}},
    )
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"].endswith("Z")
    assert created["metadata"]["generation"] == 1
    _, labelled, _ = await http.request(
        "PATCH",
        "/apis/resource.k8s.io/v1/deviceclasses/extra",
        {"metadata": {"labels": {"a": "b"}}},
        content_type=MERGE,
    )
    assert labelled["metadata"]["generation"] == 1
    spec = {"spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    _, changed, _ = await http.request(
        "PATCH", "/apis/resource.k8s.io/v1/deviceclasses/extra", spec, content_type=MERGE
    )
    assert (
        changed["metadata"]["generation"] == 2
        and changed["metadata"]["uid"] == created["metadata"]["uid"]
    )


async def test_finalizers_keep_a_deleted_object_until_the_last_one_is_removed(http: Http) -> None:
    await http.request(
        "POST",
        MAPS,
        {"metadata": {"name": "fin", "finalizers": ["gangq.dev/cleanup"]}, "data": {"k": "v"}},
    )
    code, deleting, _ = await http.request("DELETE", f"{MAPS}/fin")
    assert (
        code == 200
        and deleting["metadata"]["deletionTimestamp"]
        and deleting["metadata"]["deletionGracePeriodSeconds"] == 0
    )
    code, body, _ = await http.request(
        "PATCH",
        f"{MAPS}/fin",
        {"metadata": {"finalizers": ["gangq.dev/cleanup", "gangq.dev/more"]}},
        content_type=MERGE,
    )
    assert code == 422 and len(body["details"]["causes"]) == 2
    _, still, _ = await http.request(
        "PATCH", f"{MAPS}/fin", {"metadata": {"deletionTimestamp": None}}, content_type=MERGE
    )
    assert still["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    remove = [{"op": "remove", "path": "/metadata/finalizers/0"}]
    code, final, _ = await http.request(
        "PATCH", f"{MAPS}/fin", remove, content_type="application/json-patch+json"
    )
    assert code == 200 and "finalizers" not in final["metadata"]
    code, _, _ = await http.request("GET", f"{MAPS}/fin")
    assert code == 404


async def test_plain_delete_answers_a_success_status(http: Http) -> None:
    _, created, _ = await http.request("POST", MAPS, {"metadata": {"name": "plain"}})
    code, body, _ = await http.request("DELETE", f"{MAPS}/plain")
    assert (code, body["status"], body["details"]) == (
        200,
        "Success",
        {"name": "plain", "kind": "configmaps", "uid": created["metadata"]["uid"]},
    )


async def _owned(http: Http, owner: str) -> dict[str, object]:
    _, parent, _ = await http.request("POST", MAPS, {"metadata": {"name": owner}})
    body = claim(f"{owner}-claim")
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner,
            "uid": parent["metadata"]["uid"],
            "controller": True,
        }
    ]
    await http.request("POST", CLAIMS, body)
    return parent


async def test_background_foreground_and_orphan_propagation(cluster: Emulator, http: Http) -> None:
    storage = cluster.registry.storage
    for owner in ("bg", "fg", "orphan"):
        await _owned(http, owner)
    await http.request("DELETE", f"{MAPS}/bg", {"propagationPolicy": "Background"})
    await wait_until(
        lambda: storage.get("resource.k8s.io/resourceclaims", "default", "bg-claim") is None
    )
    _, body, _ = await http.request(
        "DELETE", f"{MAPS}/fg", params={"propagationPolicy": "Foreground"}
    )
    assert body["metadata"]["finalizers"] == ["foregroundDeletion"]
    await wait_until(lambda: storage.get("/configmaps", "default", "fg") is None)
    assert storage.get("resource.k8s.io/resourceclaims", "default", "fg-claim") is None
    _, body, _ = await http.request("DELETE", f"{MAPS}/orphan", {"propagationPolicy": "Orphan"})
    assert body["metadata"]["finalizers"] == ["orphan"]
    await wait_until(lambda: storage.get("/configmaps", "default", "orphan") is None)
    survivor = storage.get("resource.k8s.io/resourceclaims", "default", "orphan-claim")
    assert survivor is not None and "ownerReferences" not in survivor["metadata"]


async def test_dependent_of_an_unknown_owner_uid_is_collected(
    cluster: Emulator, http: Http
) -> None:
    body = claim("dangling")
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "x",
            "uid": "11111111-2222-3333-4444-555555555555",
        }
    ]
    code, _, _ = await http.request("POST", CLAIMS, body)
    assert code == 201
    await wait_until(
        lambda: (
            cluster.registry.storage.get("resource.k8s.io/resourceclaims", "default", "dangling")
            is None
        )
    )


async def test_owner_references_are_validated(http: Http) -> None:
    body = claim("bad")
    body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}]
    code, status, _ = await http.request("POST", CLAIMS, body)
    assert (code, status["details"]["causes"][0]["field"]) == (422, "metadata.ownerReferences.uid")


async def test_deleting_a_namespace_empties_it_first(cluster: Emulator, http: Http) -> None:
    await http.request("POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
    await http.request("POST", "/api/v1/namespaces/gone/configmaps", {"metadata": {"name": "c"}})
    code, body, _ = await http.request("DELETE", "/api/v1/namespaces/gone")
    assert (code, body["status"]["phase"]) == (200, "Terminating")
    await wait_until(lambda: cluster.registry.storage.get("/namespaces", "", "gone") is None)
    assert cluster.registry.storage.get("/configmaps", "gone", "c") is None
