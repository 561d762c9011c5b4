"""Every endpoint x role: who sees what, and the refusals across tenants (PRODUCT §7)."""

from __future__ import annotations

import httpx
import pytest
from api_scenario import CLUSTER_ADMIN, QUOTA_ADMIN, VIEWER_A, VIEWER_AB, VIEWER_B, bearer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import events
from gangq.queue.store.models import EventKind

PROTECTED = [
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/team-a/a-big"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/tenants"),
    ("GET", "/v1/tenants/team-a"),
    ("PUT", "/v1/tenants/team-a"),
    ("GET", "/v1/capacity"),
]
QUOTA_BODY = {"quotas": [{"deviceClassName": "gpu.nvidia.com", "nominal": 6, "borrowingLimit": 2}]}


async def test_no_token_or_an_unknown_one_is_refused_everywhere(api: httpx.AsyncClient) -> None:
    for method, path in PROTECTED:
        body = QUOTA_BODY if method == "PUT" else None
        missing = await api.request(method, path, json=body)
        assert (missing.status_code, missing.headers["www-authenticate"]) == (401, "Bearer"), path
        assert missing.json()["detail"] == "send a bearer token: Authorization: Bearer TOKEN"
        unknown = await api.request(method, path, json=body, headers=bearer("not-a-known-token"))
        assert unknown.status_code == 401, path
        assert unknown.json()["detail"] == "the bearer token is unknown or expired"


async def test_probes_and_openapi_need_no_token_and_metrics_are_not_on_the_rest_port(
    api: httpx.AsyncClient,
) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json"):
        assert (await api.get(path)).status_code == 200, path
    assert (await api.get("/metrics")).status_code == 404


def job_keys(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {f"{j['namespace']}/{j['name']}" for j in response.json()["items"]}


ALL_JOBS = {"team-a/a-small", "team-a/a-big", "team-b/b-one"}


@pytest.mark.parametrize(
    ("token", "query", "expected"),
    [
        pytest.param(VIEWER_A, "", {"team-a/a-small", "team-a/a-big"}, id="viewer-a"),
        pytest.param(VIEWER_B, "", {"team-b/b-one"}, id="viewer-b"),
        pytest.param(VIEWER_AB, "", ALL_JOBS, id="viewer-ab"),
        pytest.param(VIEWER_AB, "?tenant=team-b", {"team-b/b-one"}, id="viewer-ab-chooses-b"),
        pytest.param(QUOTA_ADMIN, "", ALL_JOBS, id="quota-admin"),
        pytest.param(CLUSTER_ADMIN, "", ALL_JOBS, id="cluster-admin"),
        pytest.param(CLUSTER_ADMIN, "?tenant=team-a&phase=Queued", {"team-a/a-big"}, id="filters"),
    ],
)
async def test_job_list_per_role(
    api: httpx.AsyncClient, token: str, query: str, expected: set[str]
) -> None:
    assert job_keys(await api.get(f"/v1/jobs{query}", headers=bearer(token))) == expected


async def test_viewer_cannot_list_another_tenants_jobs(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/jobs?tenant=team-b", headers=bearer(VIEWER_A))
    assert response.status_code == 403
    assert response.json()["detail"] == "user 'ana' may not read tenant 'team-b'"


async def test_viewer_of_several_tenants_sees_all_of_theirs(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/jobs?phase=Admitted", headers=bearer(VIEWER_AB))
    assert job_keys(response) == {"team-a/a-small", "team-b/b-one"}
    assert response.json()["total"] == 2


async def test_job_list_pages(api: httpx.AsyncClient) -> None:
    first = (await api.get("/v1/jobs?limit=2", headers=bearer(CLUSTER_ADMIN))).json()
    second = (await api.get("/v1/jobs?limit=2&offset=2", headers=bearer(CLUSTER_ADMIN))).json()
    assert (first["total"], second["total"]) == (3, 3)
    names = [j["name"] for j in first["items"] + second["items"]]
    assert names == ["a-big", "b-one", "a-small"]


@pytest.mark.parametrize(
    ("token", "status"),
    [(VIEWER_A, 200), (VIEWER_B, 404), (VIEWER_AB, 200), (QUOTA_ADMIN, 200), (CLUSTER_ADMIN, 200)],
    ids=["viewer-a", "viewer-b", "viewer-ab", "quota-admin", "cluster-admin"],
)
async def test_one_job_per_role(api: httpx.AsyncClient, token: str, status: int) -> None:
    response = await api.get("/v1/jobs/team-a/a-big", headers=bearer(token))
    assert response.status_code == status
    if status == 404:
        assert response.json()["detail"] == "no job team-a/a-big that you may read"


async def test_pending_job_shows_position_and_reason(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/jobs/team-a/a-big", headers=bearer(VIEWER_A))).json()
    assert body["job"]["phase"] == "Queued"
    assert body["job"]["queuePosition"] == 1
    assert body["job"]["reason"] == {
        "code": "quota",
        "message": (
            "quota: tenant team-a uses 2/4 nominal, borrowing limit 4, job needs 8 gpu.nvidia.com"
        ),
    }
    assert body["placement"] == []
    assert [e["kind"] for e in body["history"]] == ["enqueued"]


async def test_admitted_job_shows_placement_and_history(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/jobs/team-a/a-small", headers=bearer(VIEWER_A))).json()
    assert body["job"]["phase"] == "Admitted"
    assert body["job"]["reason"] is None
    [replica] = body["placement"]
    assert replica["replica"] == 0
    assert len(replica["devices"]) == 2
    assert all(d.startswith(f"gpu.nvidia.com/{replica['node']}/gpu-") for d in replica["devices"])
    assert [e["kind"] for e in body["history"]][:2] == ["enqueued", "admitted"]


async def test_missing_job_is_404(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/jobs/team-a/nothing", headers=bearer(CLUSTER_ADMIN))
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("token", "tenants"),
    [
        (VIEWER_A, {"team-a"}),
        (VIEWER_B, {"team-b"}),
        (VIEWER_AB, {"team-a", "team-b"}),
        (QUOTA_ADMIN, {"team-a", "team-b"}),
        (CLUSTER_ADMIN, {"team-a", "team-b"}),
    ],
    ids=["viewer-a", "viewer-b", "viewer-ab", "quota-admin", "cluster-admin"],
)
async def test_queues_and_tenants_lists_per_role(
    api: httpx.AsyncClient, token: str, tenants: set[str]
) -> None:
    queues = (await api.get("/v1/queues", headers=bearer(token))).json()
    assert {row["tenant"] for row in queues} == tenants
    listed = (await api.get("/v1/tenants", headers=bearer(token))).json()
    assert {t["name"] for t in listed} == tenants


async def test_queue_summary_counts(api: httpx.AsyncClient) -> None:
    rows = (await api.get("/v1/queues", headers=bearer(CLUSTER_ADMIN))).json()
    by_tenant = {row["tenant"]: row for row in rows}
    assert (by_tenant["team-a"]["pending"], by_tenant["team-a"]["admitted"]) == (1, 1)
    assert by_tenant["team-a"]["oldestWaitSeconds"] > 0
    assert (by_tenant["team-b"]["pending"], by_tenant["team-b"]["oldestWaitSeconds"]) == (0, None)


@pytest.mark.parametrize(
    ("token", "status"),
    [(VIEWER_A, 403), (VIEWER_B, 200), (VIEWER_AB, 200), (QUOTA_ADMIN, 200), (CLUSTER_ADMIN, 200)],
    ids=["viewer-a", "viewer-b", "viewer-ab", "quota-admin", "cluster-admin"],
)
async def test_one_tenant_per_role(api: httpx.AsyncClient, token: str, status: int) -> None:
    response = await api.get("/v1/tenants/team-b", headers=bearer(token))
    assert response.status_code == status
    if status == 200:
        assert response.json()["quotas"][0]["nominal"] == 4


async def test_missing_tenant_is_404(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/tenants/team-z", headers=bearer(QUOTA_ADMIN))
    assert response.status_code == 404
    assert response.json()["detail"] == "no tenant 'team-z'"


@pytest.mark.parametrize(
    ("token", "tenant"),
    [(VIEWER_A, "team-a"), (VIEWER_A, "team-b"), (VIEWER_B, "team-a"), (VIEWER_AB, "team-b")],
    ids=["viewer-own-tenant", "viewer-other-tenant", "viewer-b-other", "viewer-ab"],
)
async def test_viewers_cannot_change_quotas(
    api: httpx.AsyncClient,
    session_factory: async_sessionmaker[AsyncSession],
    token: str,
    tenant: str,
) -> None:
    response = await api.put(f"/v1/tenants/{tenant}", headers=bearer(token), json=QUOTA_BODY)
    assert response.status_code == 403
    assert (
        "may not change quotas: the quota-admin or cluster-admin role is needed"
        in response.json()["detail"]
    )
    current = (await api.get(f"/v1/tenants/{tenant}", headers=bearer(CLUSTER_ADMIN))).json()
    assert current["quotas"][0]["nominal"] == 4
    async with session_factory() as session:
        assert [e.actor for e in await events.recent(session, kind=EventKind.QUOTA_CHANGED)] == [
            "seed",
            "seed",
        ]


@pytest.mark.parametrize(("token", "user"), [(QUOTA_ADMIN, "quinn"), (CLUSTER_ADMIN, "cleo")])
async def test_admins_change_quotas_and_the_history_names_them(
    api: httpx.AsyncClient,
    session_factory: async_sessionmaker[AsyncSession],
    token: str,
    user: str,
) -> None:
    response = await api.put("/v1/tenants/team-a", headers=bearer(token), json=QUOTA_BODY)
    assert response.status_code == 200, response.text
    assert response.json()["quotas"] == [
        {
            "deviceClassName": "gpu.nvidia.com",
            "nominal": 6,
            "borrowingLimit": 2,
            "weight": 1.0,
            "allowedTiers": [],
        }
    ]
    async with session_factory() as session:
        latest = (await events.recent(session, kind=EventKind.QUOTA_CHANGED, limit=1))[0]
    assert (latest.actor, latest.tenant) == (user, "team-a")
    assert latest.details["before"][0]["nominal"] == 4
    assert latest.details["after"][0]["nominal"] == 6
    shown = (await api.get("/v1/tenants/team-a", headers=bearer(VIEWER_A))).json()
    assert [(e["kind"], e["actor"]) for e in shown["history"]] == [
        ("quota_changed", user),
        ("quota_changed", "seed"),
    ]


async def test_admin_creates_a_tenant(api: httpx.AsyncClient) -> None:
    body = {
        "quotas": [
            {
                "deviceClassName": "gpu.nvidia.com",
                "nominal": 2,
                "weight": 2,
                "allowedTiers": ["small"],
            }
        ]
    }
    assert (
        await api.put("/v1/tenants/team-c", headers=bearer(QUOTA_ADMIN), json=body)
    ).status_code == 200
    created = (await api.get("/v1/tenants/team-c", headers=bearer(CLUSTER_ADMIN))).json()
    assert created["quotas"][0]["allowedTiers"] == ["small"]
    assert created["quotas"][0]["weight"] == 2.0


async def test_lowering_a_quota_below_use_stops_nothing(api: httpx.AsyncClient) -> None:
    body = {"quotas": [{"deviceClassName": "gpu.nvidia.com", "nominal": 0}]}
    assert (
        await api.put("/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN), json=body)
    ).status_code == 200
    job = (await api.get("/v1/jobs/team-a/a-small", headers=bearer(VIEWER_A))).json()
    assert job["job"]["phase"] == "Admitted"
    assert len(job["placement"]) == 1


async def test_capacity_is_readable_by_every_role(api: httpx.AsyncClient) -> None:
    for token in (VIEWER_A, VIEWER_B, VIEWER_AB, QUOTA_ADMIN, CLUSTER_ADMIN):
        response = await api.get("/v1/capacity", headers=bearer(token))
        assert response.status_code == 200, token
        [gpus] = response.json()["deviceClasses"]
        assert gpus["deviceClassName"] == "gpu.nvidia.com"
