"""The endpoints behind the web UI (`/v1/cluster`, `/v1/queues/pending`, `/v1/usage`,
`/v1/stream`) and the UI's files: authentication and tenant isolation as in the rest of /v1."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from api_scenario import CLUSTER_ADMIN, T0, VIEWER_A, VIEWER_B, bearer, job
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.api import live
from gangq.queue.store import events, jobs
from gangq.queue.store.models import EventKind, JobRow

ENDPOINTS = ("/v1/cluster", "/v1/queues/pending", "/v1/usage", "/v1/stream")


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_every_ui_endpoint_needs_a_token(api: httpx.AsyncClient, path: str) -> None:
    assert (await api.get(path)).status_code == 401
    assert (await api.get(path, headers=bearer("unknown-token-0123456789"))).status_code == 401


async def test_cluster_names_holders_only_for_readable_tenants(api: httpx.AsyncClient) -> None:
    admin = (await api.get("/v1/cluster", headers=bearer(CLUSTER_ADMIN))).json()
    (gpus,) = admin["deviceClasses"]
    assert (gpus["usage"]["total"], gpus["usage"]["tainted"]) == (16, 4)
    assert [rack["name"] for rack in gpus["racks"]] == ["r1", "r2"]
    assert {job["key"] for job in admin["jobs"]} == {"team-a/a-small", "team-b/b-one"}
    cells = [cell for rack in gpus["racks"] for node in rack["nodes"] for cell in node["devices"]]
    assert sum(1 for cell in cells if cell[1] == "reserved") == 4
    statuses = {node["name"]: node["status"] for r in gpus["racks"] for node in r["nodes"]}
    assert statuses == {
        "node-1": "Ready",
        "node-2": "Ready",
        "node-3": "Cordoned",
        "node-4": "Ready",
    }
    taints = {node["name"]: node["taints"] for r in gpus["racks"] for node in r["nodes"]}
    assert taints["node-4"] == ["gpu-maintenance=true:NoSchedule"]
    assert taints["node-1"] == taints["node-3"] == []
    assert {cell[1] for r in gpus["racks"] for node in r["nodes"] if node["name"] == "node-4"
            for cell in node["devices"]} == {"tainted"}  # fmt: skip

    answer = await api.get("/v1/cluster", headers=bearer(VIEWER_A))
    viewer = answer.json()
    assert [job["key"] for job in viewer["jobs"]] == ["team-a/a-small"]
    assert "team-b" not in answer.text and "b-one" not in answer.text
    hidden = [
        cell
        for rack in viewer["deviceClasses"][0]["racks"]
        for node in rack["nodes"]
        for cell in node["devices"]
        if cell[1] == "reserved" and cell[2] == -1
    ]
    assert len(hidden) == 2


async def test_pending_lists_the_queue_in_order_for_readable_tenants(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    async with session_factory() as session, session.begin():
        await jobs.enqueue(
            session,
            [job("team-b/b-later", "team-b", replicas=1, devices=4, at=T0 + 3)],
            actor="test",
            now=T0 + 3,
        )
    admin = (await api.get("/v1/queues/pending", headers=bearer(CLUSTER_ADMIN))).json()
    keys = [f"{i['job']['namespace']}/{i['job']['name']}" for i in admin["items"]]
    assert keys == ["team-a/a-big", "team-b/b-later"]
    assert admin["items"][0]["job"]["reason"]["message"]
    assert [i["ahead"] for i in admin["items"]] == [0, 1]
    assert admin["items"][1]["blockers"] == ["team-a/a-big"]

    viewer = await api.get("/v1/queues/pending", headers=bearer(VIEWER_B))
    body = viewer.json()
    assert body["total"] == 1
    (only,) = body["items"]
    assert only["job"]["name"] == "b-later"
    assert only["ahead"] == 1 and only["blockers"] == ["a job of another tenant"]
    assert "a-big" not in viewer.text


async def test_usage_gives_quotas_use_hours_and_the_ledger_per_readable_tenant(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    now = time.time()
    async with session_factory() as session, session.begin():
        victim = await session.scalar(select(JobRow.id).where(JobRow.name == "b-one"))
        preempted = events.Event(
            kind=EventKind.PREEMPTED,
            actor="test",
            at=now - 60,
            job_key="team-b/b-one",
            tenant="team-b",
            reason="preempted by team-a/a-big",
            details={"for": "team-a/a-big", "lost_device_h": 1.5},
        )
        await events.record(session, [(victim, preempted)])
    admin = (await api.get("/v1/usage", headers=bearer(CLUSTER_ADMIN))).json()
    by_name = {tenant["name"]: tenant for tenant in admin["tenants"]}
    assert set(by_name) == {"team-a", "team-b"}
    (gpus,) = by_name["team-a"]["deviceClasses"]
    assert (gpus["nominal"], gpus["borrowingLimit"], gpus["inUse"]) == (4, 4, 2)
    assert (gpus["waitingJobs"], gpus["waitingDevices"]) == (1, 8)
    assert by_name["team-a"]["deviceHoursLastWeek"] >= 0
    assert admin["ledger"] == [
        {
            "victimTenant": "team-b",
            "victimTier": "training",
            "byTenant": "team-a",
            "byTier": "training",
            "evictions": 1,
            "shrinks": 0,
            "lostDeviceHours": 1.5,
        }
    ]

    viewer = (await api.get("/v1/usage", headers=bearer(VIEWER_B))).json()
    assert [tenant["name"] for tenant in viewer["tenants"]] == ["team-b"]
    assert viewer["ledger"][0]["victimTenant"] == "team-b"
    assert viewer["ledger"][0]["byTenant"] is None


async def test_the_ui_files_are_served_with_a_strict_policy(api: httpx.AsyncClient) -> None:
    page = await api.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script type="module" src="app.js">' in page.text
    script = await api.get("/ui/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "sessionStorage" in script.text
    assert (await api.get("/ui")).headers["location"] == "/ui/"
    assert (await api.get("/ui/../app.py")).status_code == 404


async def test_the_stream_tells_an_open_page_that_a_job_changed(
    server: str, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    async with (
        httpx.AsyncClient(base_url=server, timeout=10) as client,
        client.stream("GET", "/v1/stream", headers=bearer(VIEWER_A)) as answer,
    ):
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.aiter_lines()
        assert await anext(lines) == "retry: 1000"
        assert await anext(lines) == "event: ready"
        assert await anext(lines) == 'data: "ana"'
        await asyncio.sleep(1.5)  # the watcher has its first marker
        async with session_factory() as session, session.begin():
            await jobs.enqueue(
                session,
                [job("team-a/a-new", "team-a", replicas=1, devices=1, at=T0 + 5)],
                actor="test",
                now=T0 + 5,
            )
        async with asyncio.timeout(8):
            async for line in lines:
                if line == "event: change":
                    assert await anext(lines) == 'data: ["jobs"]'
                    break


async def test_open_pages_share_one_change_watcher(seeded_app: FastAPI, server: str) -> None:
    """Five open streams cost the database one marker query per interval, not five."""
    async with (
        httpx.AsyncClient(base_url=server, timeout=10) as client,
        contextlib.AsyncExitStack() as streams,
    ):
        readers = []  # held: a line iterator that is collected closes its stream
        for _ in range(5):
            answer = await streams.enter_async_context(
                client.stream("GET", "/v1/stream", headers=bearer(CLUSTER_ADMIN))
            )
            readers.append(answer.aiter_lines())
            assert await anext(readers[-1]) == "retry: 1000"
        broadcaster = seeded_app.state.live
        assert broadcaster.subscribers == 5
        before = broadcaster.checks
        await asyncio.sleep(3 * live.INTERVAL_S)
        assert 1 <= broadcaster.checks - before <= 4
