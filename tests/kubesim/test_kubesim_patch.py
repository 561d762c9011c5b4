"""Issue item 5: JSON merge patch, JSON patch and strategic merge patch."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.kubesim import patch, status

from .conftest import Http, pod

PODS = "/api/v1/namespaces/default/pods"
GATE = {"name": "gangq.dev/admission"}
OTHER = {"name": "example.com/other"}


@pytest.mark.parametrize(
    ("content_type", "document", "gates"),
    [
        pytest.param(
            patch.JSON_PATCH,
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            None,
            id="json-remove-field",
        ),
        pytest.param(
            patch.JSON_PATCH,
            [
                {"op": "test", "path": "/spec/schedulingGates/0/name", "value": GATE["name"]},
                {"op": "remove", "path": "/spec/schedulingGates/0"},
            ],
            None,
            id="json-test-remove-index",
        ),
        pytest.param(patch.MERGE_PATCH, {"spec": {"schedulingGates": None}}, None, id="merge-null"),
        pytest.param(
            patch.MERGE_PATCH, {"spec": {"schedulingGates": []}}, None, id="merge-empty-list"
        ),
        pytest.param(
            patch.STRATEGIC_MERGE_PATCH, {"spec": {"schedulingGates": None}}, None, id="smp-null"
        ),
        pytest.param(
            patch.STRATEGIC_MERGE_PATCH,
            {"spec": {"schedulingGates": [dict(GATE, **{"$patch": "delete"})]}},
            None,
            id="smp-delete",
        ),
        pytest.param(
            patch.STRATEGIC_MERGE_PATCH,
            {"spec": {"schedulingGates": [{"$patch": "replace"}]}},
            None,
            id="smp-replace",
        ),
        pytest.param(
            patch.STRATEGIC_MERGE_PATCH,
            {"spec": {"schedulingGates": []}},
            [GATE],
            id="smp-empty-list-no-op",
        ),
        pytest.param(
            patch.STRATEGIC_MERGE_PATCH,
            {"spec": {"$setElementOrder/schedulingGates": []}},
            [GATE],
            id="smp-set-order-no-op",
        ),
    ],
)
async def test_every_way_to_remove_a_gate_behaves_as_the_real_server(
    http: Http, content_type: str, document: Any, gates: list[dict[str, str]] | None
) -> None:
    await http.request("POST", PODS, pod("g", gates=(GATE["name"],)))
    code, body, _ = await http.request("PATCH", f"{PODS}/g", document, content_type=content_type)
    assert code == 200
    assert body["spec"].get("schedulingGates") == gates


async def test_strategic_merge_deletes_one_of_two_gates_and_merges_conditions(http: Http) -> None:
    await http.request("POST", PODS, pod("two", gates=(GATE["name"], OTHER["name"])))
    document = {"spec": {"schedulingGates": [dict(GATE, **{"$patch": "delete"})]}}
    _, body, _ = await http.request(
        "PATCH", f"{PODS}/two", document, content_type=patch.STRATEGIC_MERGE_PATCH
    )
    assert body["spec"]["schedulingGates"] == [OTHER]
    condition = {"status": {"conditions": [{"type": "Example", "status": "True"}]}}
    _, body, _ = await http.request(
        "PATCH", f"{PODS}/two/status", condition, content_type=patch.STRATEGIC_MERGE_PATCH
    )
    assert [c["type"] for c in body["status"]["conditions"]] == ["Example", "PodScheduled"]


async def test_patch_with_a_plain_json_content_type_is_415(http: Http) -> None:
    await http.request("POST", PODS, pod("p", gates=(GATE["name"],)))
    code, body, _ = await http.request("PATCH", f"{PODS}/p", {"metadata": {"labels": {"a": "b"}}})
    assert (code, body["reason"], body["message"]) == (
        415,
        "UnsupportedMediaType",
        "415: Unsupported Media Type",
    )


def test_json_patch_failures_are_the_generic_invalid_request() -> None:
    target = {"a": [1]}
    for operations in (
        [{"op": "test", "path": "/a/0", "value": 2}],
        [{"op": "remove", "path": "/a/5"}],
    ):
        with pytest.raises(status.ApiError) as error:
            patch.json_patch(target, operations)
        assert error.value.body()["details"] == {}
    assert patch.json_patch(
        target,
        [{"op": "add", "path": "/a/-", "value": 2}, {"op": "move", "from": "/a", "path": "/b"}],
    ) == {"b": [1, 2]}


def test_merge_patch_and_finalizer_set_merge() -> None:
    assert patch.merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    merged = patch.strategic_merge(
        {"metadata": {"finalizers": ["a"]}}, {"metadata": {"finalizers": ["b", "a"]}}
    )
    assert merged == {"metadata": {"finalizers": ["a", "b"]}}
    dropped = patch.strategic_merge(
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
    )
    assert dropped == {"metadata": {"finalizers": ["b"]}}
