"""Objects read back carry the empty structs a real server prints: Go serializes a struct field
even when it is unset, so clients that index `spec` or `status` without a check work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.kubesim.conftest import Http

CORPUS = Path(__file__).resolve().parents[1] / "contract" / "reference"
CORE = "/api/v1"
DRA = "/apis/resource.k8s.io/v1"


def captured_node_status() -> dict[str, Any]:
    """The part of 10-01's Node status the server added to what the client sent."""
    case = json.loads(next(CORPUS.glob("10-01-*.json")).read_text())
    returned = case["response"]["body"]["status"]
    return {key: returned[key] for key in ("daemonEndpoints", "nodeInfo")}


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        pytest.param(
            f"{CORE}/nodes",
            {"metadata": {"name": "bare"}},
            {"spec": {}, "status": captured_node_status()},
            id="node",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            {"metadata": {"name": "bare"}},
            {"spec": {}},
            id="lease",
        ),
        pytest.param(
            f"{DRA}/deviceclasses", {"metadata": {"name": "bare"}}, {"spec": {}}, id="deviceclass"
        ),
        pytest.param(
            f"{DRA}/namespaces/default/resourceclaims",
            {"metadata": {"name": "bare"}},
            {"spec": {"devices": {}}, "status": {}},
            id="resourceclaim",
        ),
        pytest.param(
            f"{CORE}/namespaces/default/events",
            {"metadata": {"name": "bare"}, "involvedObject": {"kind": "Pod", "name": "p"}},
            {"source": {}},
            id="event",
        ),
    ],
)
async def test_an_object_created_without_its_structs_reads_them_back_empty(
    http: Http, path: str, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    code, created, _ = await http.request("POST", path, body)
    assert code == 201, created
    code, read, _ = await http.request("GET", f"{path}/bare")
    assert code == 200
    for found in (created, read):
        assert {key: found.get(key) for key in expected} == expected


async def test_an_update_that_drops_a_struct_gets_it_back(http: Http) -> None:
    path = f"{CORE}/nodes"
    code, created, _ = await http.request("POST", path, {"metadata": {"name": "n"}})
    assert code == 201
    del created["spec"]
    code, updated, _ = await http.request("PUT", f"{path}/n", created)
    assert code == 200, updated
    assert updated["spec"] == {}
    assert updated["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 0}}
