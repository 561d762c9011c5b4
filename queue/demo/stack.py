"""The embedded parts a demo run stands on: a scratch database and the REST API on localhost.

Owns their start and cleanup: a fresh database per run (created on `DATABASE_URL`'s server or
on the embedded PostgreSQL, dropped afterwards, so runs never see each other's jobs), and the
API on 127.0.0.1 with a one-run admin token, served like `gangq run` serves it: from its own
thread and event loop, with `/metrics` on a port of its own. It must not play the scenario or
judge it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import yaml
from fastapi import FastAPI

from gangq.api import hosting, scrape
from gangq.queue.store import database
from gangq.queue.store.errors import StoreError

API_HOST = "127.0.0.1"


@contextlib.asynccontextmanager
async def scratch_database(*, keep: bool = False) -> AsyncIterator[str]:
    """A new, empty database for this run; its URL uses the asyncpg dialect."""
    server = await asyncio.to_thread(database.resolve_url)
    name = f"gangq_demo_{secrets.token_hex(6)}"
    await _admin(server, f'CREATE DATABASE "{name}"', what="create a database")
    try:
        yield database.with_database(server, name)
    finally:
        if not keep:
            await _admin(
                server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', what="drop its database"
            )


async def _admin(url: str, statement: str, *, what: str) -> None:
    try:
        connection = await asyncpg.connect(database.libpq_url(url), timeout=10)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as error:
        raise StoreError(f"PostgreSQL at {_safe(url)} is not reachable: {error}") from error
    try:
        await connection.execute(statement)
    except asyncpg.PostgresError as error:
        raise StoreError(
            f"PostgreSQL at {_safe(url)}: the demo could not {what}: {error}"
        ) from error
    finally:
        await connection.close()


def _safe(url: str) -> str:
    return url.rsplit("@", 1)[-1]


@dataclass(frozen=True, slots=True)
class ServedApi:
    base_url: str
    metrics_url: str
    host: hosting.ApiHost

    async def wait(self) -> None:
        """Wait while the API serves; raises when its thread ended on its own (a failure)."""
        while True:
            self.host.check()
            await asyncio.sleep(0.5)


def admin_token_file(directory: Path) -> tuple[str, Path]:
    """A token file with one cluster-admin token that lives as long as the run."""
    token = secrets.token_urlsafe(24)
    path = directory / "tokens.yaml"
    body = {"tokens": {token: {"user": "demo", "roles": ["cluster-admin"]}}}
    path.write_text(yaml.safe_dump(body))
    path.chmod(0o600)
    return token, path


def add_viewer_tokens(path: Path, tenants: Sequence[str]) -> dict[str, str]:
    """A viewer token per tenant added to the token file, so a person (or a browser test) can
    see the API and the web UI as one tenant does; returns tenant -> token."""
    body = yaml.safe_load(path.read_text())
    viewers = {tenant: secrets.token_urlsafe(24) for tenant in tenants}
    for tenant, token in viewers.items():
        body["tokens"][token] = {
            "user": f"{tenant}-viewer",
            "tenants": [tenant],
            "roles": ["viewer"],
        }
    path.write_text(yaml.safe_dump(body))
    return viewers


def token_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="gangq-demo-")


@contextlib.asynccontextmanager
async def api_server(app: FastAPI, *, port: int = 0) -> AsyncIterator[ServedApi]:
    """Serve `app` on 127.0.0.1:`port` (0: a free one) and its metrics on a free port, from
    their own thread until the context ends."""
    served = hosting.ApiHost(
        [
            hosting.Endpoint(app, API_HOST, port),
            hosting.Endpoint(scrape.create_metrics_app(app.state.metrics), API_HOST, 0),
        ],
        name="gangq-demo-api",
    )
    await served.start_async()
    try:
        yield ServedApi(served.urls[0], served.urls[1], served)
    finally:
        await served.stop_async()
