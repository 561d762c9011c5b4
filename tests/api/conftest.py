"""Fixtures of the API tests: the seeded scenario against a real PostgreSQL, tokens from a file.

The app is reached in two ways: in-process over ASGI (`api`, for async tests) and over real HTTP
on a loopback port (`server`, for blocking clients: the CLI and schemathesis). The server runs in
a thread with its own event loop, so a blocking call from the test cannot stall it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from api_scenario import TOKENS, cluster_inventory, seed
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue.core import capacity

SERVER_START_TIMEOUT_S = 30.0


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": TOKENS}))
    return path


@pytest.fixture
async def seeded_app(
    database_url: str, session_factory: async_sessionmaker[AsyncSession], token_file: Path
) -> FastAPI:
    """The app over the scenario's database, with a synced view of the scenario's cluster."""
    await seed(session_factory, database_url)
    return create_app(
        ApiSettings(database_url=database_url, token_file=token_file),
        cluster=capacity.FixedClusterView(cluster_inventory()),
    )


@pytest.fixture
async def api(seeded_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with seeded_app.router.lifespan_context(seeded_app):
        transport = httpx.ASGITransport(app=seeded_app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
            yield client


@pytest.fixture
def server(seeded_app: FastAPI) -> Iterator[str]:
    """Base URL of the app served by uvicorn on 127.0.0.1 (a free port), lifespan included."""
    config = uvicorn.Config(seeded_app, host="127.0.0.1", port=0, log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, name="gangq-api-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not running.started:
        assert thread.is_alive(), "the API server stopped while starting"
        assert time.monotonic() < deadline, "the API server did not start in time"
        time.sleep(0.01)
    port = running.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        thread.join(timeout=SERVER_START_TIMEOUT_S)
