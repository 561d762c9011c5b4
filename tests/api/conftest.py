"""Fixtures of the API tests: the seeded scenario against a real PostgreSQL, tokens from a file.

The app is reached in two ways: in-process over ASGI (`api`, for async tests) and over real HTTP
on a loopback port (`server`, for blocking clients and the edge: the CLI, schemathesis, slow
clients). The server is hosted as `gangq run` hosts it: in a thread with its own event loop, so
a blocking call from the test cannot stall it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import MappingProxyType

import httpx
import pytest
import yaml
from api_scenario import TOKENS, cluster_inventory, seed
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.api import hosting, published
from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue.kube import podgroups

NAMESPACE_TENANTS = {"team-a": "team-a", "team-b": "team-b", "inference": "prod"}
WIDE_GROUP = podgroups.Scheduled(
    name="b-wide-1a2b3c-0-1",
    min_count=2,
    status="False",
    reason="Unschedulable",
    message="pod group is unschedulable",
    since="2026-01-01T00:00:10Z",
    created="2026-01-01T00:00:01Z",
)
"""The PodGroup the controller publishes for team-b/b-wide, as kube-scheduler left it."""


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": TOKENS}))
    return path


@pytest.fixture
async def seeded_app(
    database_url: str, session_factory: async_sessionmaker[AsyncSession], token_file: Path
) -> FastAPI:
    """The app over the scenario's database, with a synced view of the scenario's cluster
    and its namespaces, as the controller would publish them."""
    await seed(session_factory, database_url)
    view = published.PublishedCluster(
        published.Snapshot(
            cluster_inventory(),
            MappingProxyType(NAMESPACE_TENANTS),
            MappingProxyType({"team-b/b-wide": (WIDE_GROUP,)}),
        )
    )
    return create_app(ApiSettings(database_url=database_url, token_file=token_file), cluster=view)


@pytest.fixture
async def api(seeded_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with seeded_app.router.lifespan_context(seeded_app):
        transport = httpx.ASGITransport(app=seeded_app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
            yield client


@pytest.fixture
def server(seeded_app: FastAPI) -> Iterator[str]:
    """Base URL of the app served on 127.0.0.1 (a free port) from its own thread, lifespan
    included, with the same uvicorn settings as `gangq run`."""
    with hosting.ApiHost([hosting.Endpoint(seeded_app, "127.0.0.1", 0)]) as served:
        yield served.urls[0]
