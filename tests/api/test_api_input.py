"""Bad input gets a 4xx that says what to fix; capacity, metrics, OpenAPI; never a 500.

The generated requests of every operation are in test_api_openapi.py (schemathesis).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from api_scenario import CLUSTER_ADMIN, QUOTA_ADMIN, bearer
from fastapi import FastAPI

from gangq.api import auth, scrape
from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue import metrics


def quota_body(**fields: Any) -> dict[str, Any]:
    return {"quotas": [{"deviceClassName": "gpu.nvidia.com", "nominal": 4, **fields}]}


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        pytest.param(
            quota_body(nominal=-1), 422, "greater than or equal to 0", id="negative-nominal"
        ),
        pytest.param(quota_body(weight=0), 422, "greater than 0", id="zero-weight"),
        pytest.param(quota_body(borrowingLimit="many"), 422, "valid integer", id="text-limit"),
        pytest.param(quota_body(nominal=True), 422, "valid integer", id="boolean-nominal"),
        pytest.param(quota_body(nominal="4"), 422, "valid integer", id="numeric-text-nominal"),
        pytest.param(quota_body(weight=False), 422, "valid number", id="boolean-weight"),
        pytest.param(
            quota_body(allowedTiers=["Training!"]), 422, "should match pattern", id="bad-tier"
        ),
        pytest.param(
            quota_body(colour="red"), 422, "Extra inputs are not permitted", id="unknown-field"
        ),
        pytest.param({"quotas": [{"nominal": 1}]}, 422, "Field required", id="missing-class"),
        pytest.param(
            quota_body(deviceClassName="GPU!"), 422, "should match pattern", id="bad-class-name"
        ),
        pytest.param(
            {"quotas": [quota_body()["quotas"][0], quota_body()["quotas"][0]]},
            400,
            "device class given twice",
            id="duplicate-class",
        ),
        pytest.param([], 422, "valid dictionary", id="not-an-object"),
    ],
)
async def test_bad_quota_bodies(
    api: httpx.AsyncClient, body: Any, status: int, fragment: str
) -> None:
    response = await api.put("/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN), json=body)
    assert response.status_code == status
    assert fragment in str(response.json()["detail"])
    unchanged = (await api.get("/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN))).json()
    assert unchanged["quotas"][0]["nominal"] == 4


async def test_a_whole_json_number_is_an_integer(api: httpx.AsyncClient) -> None:
    """JSON Schema's integer: 6.0 is 6, as the OpenAPI document says."""
    response = await api.put(
        "/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN), json=quota_body(nominal=6.0)
    )
    assert response.status_code == 200
    assert response.json()["quotas"][0]["nominal"] == 6


async def test_a_wrong_method_names_every_allowed_one(api: httpx.AsyncClient) -> None:
    response = await api.delete("/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN))
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD, PUT"
    assert response.json()["detail"] == "method DELETE is not allowed here; use GET, HEAD, PUT"


async def test_body_that_is_not_json(api: httpx.AsyncClient) -> None:
    response = await api.put(
        "/v1/tenants/team-a",
        headers={**bearer(QUOTA_ADMIN), "content-type": "application/json"},
        content=b"{nominal: 3",
    )
    assert response.status_code == 422
    assert "JSON decode error" in str(response.json()["detail"])


@pytest.mark.parametrize(
    ("path", "status", "fragment"),
    [
        ("/v1/jobs?limit=0", 422, "greater than or equal to 1"),
        ("/v1/jobs?limit=5000", 422, "less than or equal to 1000"),
        ("/v1/jobs?offset=-1", 422, "greater than or equal to 0"),
        ("/v1/jobs?phase=Sleeping", 400, "phase 'Sleeping' is not one of"),
        ("/v1/jobs/Team_A/x", 422, "should match pattern"),
        ("/v1/tenants/UPPER", 422, "should match pattern"),
    ],
)
async def test_bad_queries_and_paths(
    api: httpx.AsyncClient, path: str, status: int, fragment: str
) -> None:
    response = await api.get(path, headers=bearer(CLUSTER_ADMIN))
    assert response.status_code == status
    assert fragment in str(response.json()["detail"])


async def test_capacity_counts_devices_by_state_node_and_rack(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/capacity", headers=bearer(CLUSTER_ADMIN))).json()
    [gpus] = body["deviceClasses"]
    # node-3 is cordoned: its 4 GPUs are unavailable; node-4 is tainted NoSchedule and no job
    # tolerates it: its 4 GPUs are apart, neither free nor in a gang; a-small and b-one
    # reserve 2 each.
    counted = ("total", "free", "reserved", "heldByOthers", "unavailable", "tainted")
    assert {k: gpus[k] for k in counted} == {
        "total": 16,
        "free": 4,
        "reserved": 4,
        "heldByOthers": 0,
        "unavailable": 4,
        "tainted": 4,
    }
    assert body["taintedNodes"] == [
        {"node": "node-4", "taints": ["gpu-maintenance=true:NoSchedule"]}
    ]
    nodes = {n["node"]: n["deviceClasses"][0] for n in body["nodes"]}
    assert set(nodes) == {"node-1", "node-2", "node-3", "node-4"}
    assert nodes["node-3"]["unavailable"] == 4
    assert (nodes["node-4"]["tainted"], nodes["node-4"]["free"]) == (4, 0)
    assert sum(n["free"] for n in nodes.values()) == gpus["free"]
    whole_free_nodes = sum(1 for n in nodes.values() if n["free"] == 4)
    assert whole_free_nodes < 3, "node-4 is no replica of the largest gang"
    assert gpus["largestPlaceableGang"] == {
        "replicas": whole_free_nodes,
        "devicesPerReplica": 4,
        "devices": 4 * whole_free_nodes,
    }
    assert gpus["largestReplica"] == max(n["free"] for n in nodes.values())
    racks = {(d["key"], d["value"]): d["deviceClasses"][0]["total"] for d in body["domains"]}
    assert racks == {("gangq.dev/rack", "r1"): 8, ("gangq.dev/rack", "r2"): 8}


async def test_capacity_without_a_cluster_view_is_503(database_url: str, token_file: Path) -> None:
    app = create_app(ApiSettings(database_url=database_url, token_file=token_file))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
            response = await client.get("/v1/capacity", headers=bearer(CLUSTER_ADMIN))
    assert response.status_code == 503
    assert "no view of the cluster yet" in response.json()["detail"]


async def test_unreachable_database_is_503_not_500(token_file: Path) -> None:
    # Port 9 (discard) on loopback: nothing listens there, so connecting fails at once.
    app = create_app(
        ApiSettings(database_url="postgresql://postgres@127.0.0.1:9/gangq", token_file=token_file)
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
            jobs = await client.get("/v1/jobs", headers=bearer(CLUSTER_ADMIN))
            ready = await client.get("/readyz")
    assert jobs.status_code == 503
    assert jobs.json()["detail"] == "the database is unavailable; retry shortly"
    assert ready.status_code == 503
    assert metrics.exposition(app.state.metrics).count(b"gangq_database_up 0.0") == 1


async def test_metrics_are_exposed_in_prometheus_text_on_their_own_app(
    seeded_app: FastAPI, api: httpx.AsyncClient
) -> None:
    transport = httpx.ASGITransport(app=scrape.create_metrics_app(seeded_app.state.metrics))
    async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
        response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE gangq_admission_wait_seconds histogram" in response.text
    assert "gangq_database_up 1.0" in response.text


async def test_openapi_lists_every_endpoint(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    assert set(spec["paths"]) >= {
        "/v1/jobs",
        "/v1/jobs/{namespace}/{name}",
        "/v1/queues",
        "/v1/tenants",
        "/v1/tenants/{tenant}",
        "/v1/capacity",
        "/healthz",
        "/readyz",
    }
    assert "/metrics" not in spec["paths"]
    assert "put" in spec["paths"]["/v1/tenants/{tenant}"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


class NoRoleAuthenticator:
    """Any token is a user without roles, as TokenReview gives for a user in no gangq group."""

    async def authenticate(self, token: str, *, source: str) -> auth.Principal | None:
        return auth.Principal(user="someone")


async def test_a_user_without_a_role_reads_nothing(database_url: str) -> None:
    app = create_app(ApiSettings(database_url=database_url), authenticator=NoRoleAuthenticator())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
            for path in ("/v1/jobs", "/v1/queues", "/v1/tenants", "/v1/capacity"):
                response = await client.get(path, headers=bearer("any-token"))
                assert response.status_code == 403, path
                assert response.json()["detail"] == (
                    "user 'someone' has no gangq role (viewer, quota-admin or cluster-admin)"
                )
