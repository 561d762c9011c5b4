"""The embedded parts a demo run stands on: a scratch database and the REST API on localhost.

Owns their start and cleanup: a fresh database per run (created on `DATABASE_URL`'s server or
on the embedded PostgreSQL, dropped afterwards, so runs never see each other's jobs), and a
uvicorn server for the API on 127.0.0.1 with a one-run admin token. It must not play the
scenario or judge it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import uvicorn
import yaml
from fastapi import FastAPI

from gangq.queue.core.errors import GangqError, InvalidInputError
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
    task: asyncio.Task[None]
    """Ends when the server stops (Ctrl-C stops it)."""


def admin_token_file(directory: Path) -> tuple[str, Path]:
    """A token file with one cluster-admin token that lives as long as the run."""
    token = secrets.token_urlsafe(24)
    path = directory / "tokens.yaml"
    body = {"tokens": {token: {"user": "demo", "roles": ["cluster-admin"]}}}
    path.write_text(yaml.safe_dump(body))
    path.chmod(0o600)
    return token, path


def token_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="gangq-demo-")


class _Server(uvicorn.Server):
    """A server that leaves SIGINT to asyncio: Ctrl-C cancels the run, which stops the server
    like every other part (uvicorn's own handler would re-raise it after its shutdown)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@contextlib.asynccontextmanager
async def api_server(app: FastAPI, *, port: int = 0) -> AsyncIterator[ServedApi]:
    """Serve `app` on 127.0.0.1:`port` (0: a free one) until the context ends."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((API_HOST, port))
    except OSError as error:
        listener.close()
        raise InvalidInputError(f"cannot listen on {API_HOST}:{port}: {error.strerror}") from error
    server = _Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[listener]), name="gangq-demo-api")
    try:
        while not server.started:
            if task.done():
                await task
                raise GangqError("the REST API stopped while starting")
            await asyncio.sleep(0.02)
        yield ServedApi(f"http://{API_HOST}:{listener.getsockname()[1]}", task)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        listener.close()
