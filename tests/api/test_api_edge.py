"""The API's edge against hostile or careless clients, over real HTTP (one test per finding).

Large bodies are refused before they are read, health probes cost PostgreSQL nothing, bad
filters are 4xx and leave `gangq_database_up` alone, another tenant's job costs no query,
other tenants' job names never reach a viewer, and slow or odd requests get a clean answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_scenario import CLUSTER_ADMIN, QUOTA_ADMIN, VIEWER_A, VIEWER_B, bearer
from conftest import NAMESPACE_TENANTS
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.api import bodies, hosting, published
from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue import metrics
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import database, events
from gangq.queue.store.models import EventKind

SOCKET_TIMEOUT_S = 5.0


def raw(base_url: str, request: bytes, *, then_wait: bool = True) -> bytes:
    """Send bytes on a fresh connection; what the server answers before it closes or
    SOCKET_TIMEOUT_S passes (a server that waits for more sends nothing)."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as connection:
        connection.sendall(request)
        received = b""
        with contextlib.suppress(TimeoutError):
            while chunk := connection.recv(65536):
                received += chunk
                if not then_wait:
                    break
        return received


def test_a_large_body_without_a_token_is_refused_before_it_is_read(server: str) -> None:
    """Finding 1: a few bytes of a large body sent, the answer comes at once: 413 for 50 MB
    announced, 401 for a streamed body without a token (its size is unknown)."""
    start = b"PUT /v1/tenants/ci HTTP/1.1\r\nHost: gangq\r\nContent-Type: application/json\r\n"
    announced = raw(
        server, start + b'Content-Length: 52428800\r\n\r\n{"quotas": [', then_wait=False
    )
    assert announced.startswith(b"HTTP/1.1 413 "), announced[:200]
    streamed = raw(
        server, start + b'Transfer-Encoding: chunked\r\n\r\nc\r\n{"quotas": [\r\n', then_wait=False
    )
    assert streamed.startswith(b"HTTP/1.1 401 "), streamed[:200]
    for answer in (announced, streamed):
        assert b"connection: close" in answer.lower()


def test_bodies_over_the_routes_cap_are_413_even_for_admins(server: str) -> None:
    big = {
        "quotas": [{"deviceClassName": f"class-{i}.example.com", "nominal": 1} for i in range(300)]
    }
    declared = httpx.put(f"{server}/v1/tenants/team-a", headers=bearer(QUOTA_ADMIN), json=big)
    assert declared.status_code == 413
    assert "limit of 8192 bytes" in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 1024

    streamed = httpx.put(
        f"{server}/v1/tenants/team-a",
        headers={**bearer(QUOTA_ADMIN), "content-type": "application/json"},
        content=chunks(),
    )
    assert streamed.status_code == 413
    unauthenticated = httpx.request("GET", f"{server}/v1/jobs", content=b"x" * 4096)
    assert unauthenticated.status_code == 413


class ConnectionCounter:
    """A TCP relay in front of PostgreSQL that counts the connections it accepted."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.accepted = 0
        self.port = 0

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        relay = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = relay.sockets[0].getsockname()[1]
        async with relay:
            yield


async def test_readyz_opens_no_connection_per_call(database_url: str, token_file: Path) -> None:
    """Finding 2: 40 concurrent probes, not one new PostgreSQL connection."""
    url = database.normalize_url(database_url)
    host, _, rest = url.partition("@")[2].partition(":")
    port = rest.partition("/")[0]
    counter = ConnectionCounter(host, int(port))
    async with counter.running():
        relayed = url.replace(f"@{host}:{port}/", f"@127.0.0.1:{counter.port}/")
        app = create_app(ApiSettings(database_url=relayed, token_file=token_file))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as http:
                before = counter.accepted
                answers = await asyncio.gather(*(http.get("/readyz") for _ in range(40)))
                after = counter.accepted
    assert {a.status_code for a in answers} == {200}
    assert answers[0].json()["database"] == "up"
    assert before >= 1 and after == before


@pytest.mark.parametrize(
    "query", ["tier=%00", "tenant=%00", "tier=a%00b", "phase=%00", "tenant=team-a%20x"]
)
def test_a_nul_in_a_filter_is_bad_input_not_an_outage(
    seeded_app: FastAPI, server: str, query: str
) -> None:
    """Finding 3: 4xx, and the database-up gauge never moves."""
    registry = seeded_app.state.metrics.registry
    for _ in range(5):
        answer = httpx.get(f"{server}/v1/jobs?{query}", headers=bearer(CLUSTER_ADMIN))
        assert answer.status_code in (400, 422), answer.text
        assert "database" not in answer.text
    assert registry.get_sample_value("gangq_database_up") == 1.0


def test_metrics_are_served_on_their_own_port_only(seeded_app: FastAPI) -> None:
    """Finding 4: the REST port has no /metrics; the metrics port has nothing else."""
    from gangq.api import scrape

    metrics_app = scrape.create_metrics_app(seeded_app.state.metrics)
    endpoints = [
        hosting.Endpoint(seeded_app, "127.0.0.1", 0),
        hosting.Endpoint(metrics_app, "127.0.0.1", 0),
    ]
    with hosting.ApiHost(endpoints) as served:
        rest, scraped = served.urls
        assert httpx.get(f"{rest}/metrics").status_code == 404
        answer = httpx.get(f"{scraped}/metrics")
        assert answer.status_code == 200 and "gangq_database_up" in answer.text
        assert httpx.get(f"{scraped}/v1/jobs", headers=bearer(CLUSTER_ADMIN)).status_code == 404


async def test_another_tenants_job_costs_no_query(
    seeded_app: FastAPI, api: httpx.AsyncClient
) -> None:
    """Finding 5: authorization comes first, so existing and missing jobs take the same path."""
    statements: list[str] = []
    engine = seeded_app.state.session_factory.kw["bind"]

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        existing = await api.get("/v1/jobs/team-a/a-big", headers=bearer(VIEWER_B))
        missing = await api.get("/v1/jobs/team-a/no-such-job", headers=bearer(VIEWER_B))
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)
    assert existing.status_code == missing.status_code == 404
    assert existing.json()["detail"].replace("a-big", "X") == missing.json()["detail"].replace(
        "no-such-job", "X"
    )
    assert statements == []


async def test_other_tenants_job_names_never_reach_a_viewer(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    """Finding 6: the viewer reads 'a higher-tier job of another tenant'; the admin the name."""
    secret = "inference/secret-prod-model-v7"
    async with session_factory() as session, session.begin():
        await events.record(
            session,
            [
                (
                    None,
                    events.Event(
                        kind=EventKind.PREEMPTED,
                        actor="controller",
                        at=time.time(),
                        job_key="team-a/a-small",
                        tenant="team-a",
                        reason=f"preempted by {secret} (tier prod-inference > training)",
                        details={"for": secret},
                    ),
                )
            ],
        )
    viewer = (await api.get("/v1/jobs/team-a/a-small", headers=bearer(VIEWER_A))).json()
    [preempted] = [e for e in viewer["history"] if e["kind"] == "preempted"]
    assert preempted["reason"] == (
        "preempted by a higher-tier job of another tenant (tier prod-inference > training)"
    )
    assert preempted["details"] == {"for": "a job of another tenant"}
    assert "secret" not in str(viewer)
    admin = (await api.get("/v1/jobs/team-a/a-small", headers=bearer(CLUSTER_ADMIN))).json()
    assert secret in str(admin["history"])


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_quota_body_are_422(server: str, value: str) -> None:
    """Finding 8: JSON has no NaN; echoing one back must not turn the 422 into a 500."""
    for field in ("nominal", "weight"):
        body = f'{{"quotas": [{{"deviceClassName": "gpu.nvidia.com", "{field}": {value}}}]}}'
        answer = httpx.put(
            f"{server}/v1/tenants/team-a",
            headers={**bearer(QUOTA_ADMIN), "content-type": "application/json"},
            content=body,
        )
        assert answer.status_code == 422, (field, answer.text)


def test_half_sent_headers_are_cut_off(seeded_app: FastAPI) -> None:
    """Finding 8: a client that never finishes its headers is disconnected."""
    with hosting.ApiHost(
        [hosting.Endpoint(seeded_app, "127.0.0.1", 0)], header_seconds=0.5
    ) as served:
        answer = raw(served.urls[0], b"GET /healthz HTTP/1.1\r\nHost: gangq\r\n")
        complete = httpx.get(f"{served.urls[0]}/healthz")
    assert answer == b""
    assert complete.status_code == 200


def test_head_slash_and_security_headers(server: str) -> None:
    """Finding 8: HEAD where GET is, no redirect echoing Host, headers on every answer."""
    head = httpx.head(f"{server}/v1/jobs", headers=bearer(VIEWER_A))
    get = httpx.get(f"{server}/v1/jobs", headers=bearer(VIEWER_A))
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == get.headers["content-length"]
    assert httpx.head(f"{server}/healthz").status_code == 200
    slash = httpx.get(f"{server}/v1/jobs/", headers={**bearer(VIEWER_A), "Host": "evil.example"})
    assert slash.status_code == 404 and "location" not in slash.headers
    for answer in (get, slash, httpx.get(f"{server}/v1/jobs")):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
    assert "cache-control" not in httpx.get(f"{server}/healthz").headers


def test_the_viewer_mapping_covers_the_scenario() -> None:
    view = published.PublishedCluster(published.Snapshot(None, NAMESPACE_TENANTS))
    assert view.tenant_of("team-a") == "team-a" and view.tenant_of("elsewhere") is None


async def test_a_stalled_body_is_dropped_with_408() -> None:
    """Finding 8: a client that stops sending its body is answered, not waited on forever."""
    reached: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append((await receive())["body"])

    guard = bodies.BodyGuard(app, idle_seconds=0.05)
    sent: list[dict[str, Any]] = []
    stalled = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not sent:
            sent.append({"type": "http.request", "body": b"{", "more_body": True})
            return sent[-1]
        await stalled.wait()
        raise AssertionError("never resumed")

    answers: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        answers.append(message)

    scope = {
        "type": "http",
        "method": "PUT",
        "path": "/anything",
        "headers": [(b"content-length", b"100")],
    }
    await guard(scope, receive, send)
    assert answers[0]["status"] == 408
    assert reached == []


async def test_readyz_reports_the_database_the_cluster_view_and_leadership(
    seeded_app: FastAPI, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/readyz")).json() == {
        "status": "ok",
        "database": "up",
        "cluster": "synced",
        "leader": False,
    }
    metrics.set_leader(seeded_app.state.metrics, is_leader=True)
    assert (await api.get("/readyz")).json()["leader"] is True


def test_a_taken_port_is_a_clear_error_before_anything_serves(seeded_app: FastAPI) -> None:
    with hosting.ApiHost([hosting.Endpoint(seeded_app, "127.0.0.1", 0)]) as served:
        taken = int(served.urls[0].rsplit(":", 1)[1])
        with pytest.raises(InvalidInputError, match=f"cannot listen on 127.0.0.1:{taken}"):
            hosting.ApiHost(
                [
                    hosting.Endpoint(seeded_app, "127.0.0.1", 0),
                    hosting.Endpoint(seeded_app, "127.0.0.1", taken),
                ]
            )
