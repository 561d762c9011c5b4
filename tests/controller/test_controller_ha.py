"""High availability with real processes: two `gangq run` against one database and one cluster.

Only the leader acts (every store event names its actor, and the follower's /readyz says it
does not lead); when the leader is killed with SIGKILL, the follower takes over and admits new
work within 15 s (issue 6 item 7).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gangq.queue.kube import resources
from gangq.queue.store import database, jobs
from tests.controller.conftest import Harness, training_job, wait_for

TOKEN = "admin-token-0123456789"
SETTINGS_IN_FILE = {"tenants", "cycle_interval_s", "coalesce_s", "leader_retry_s"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Process:
    """One `gangq run` subprocess with its own actor name, port and log file."""

    def __init__(self, name: str, *, workdir: Path, database_url: str) -> None:
        self.name = name
        self.port = _free_port()
        self.log = workdir / f"{name}.log"
        self._workdir = workdir
        self._database_url = database_url
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        environment = {
            **os.environ,
            "GANGQ_ACTOR": f"controller-{self.name}",
            "GANGQ_HOLDER": self.name,
            "GANGQ_TOKEN_FILE": str(self._workdir / "tokens.yaml"),
        }
        with self.log.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "from gangq.queue.cli import main; main()",
                "run",
                "--config",
                str(self._workdir / "gangq.yaml"),
                "--kubeconfig",
                str(self._workdir / "kubeconfig"),
                "--database-url",
                self._database_url,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--metrics-port",
                str(_free_port()),
                env=environment,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )

    async def leads(self) -> bool | None:
        """Whether the process's /readyz says it leads; None while its API does not answer."""
        try:
            async with httpx.AsyncClient(timeout=2.0) as http:
                ready = await http.get(f"http://127.0.0.1:{self.port}/readyz")
        except httpx.TransportError:
            return None
        return bool(ready.json().get("leader")) if ready.status_code == 200 else None

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(sig)
        try:
            await asyncio.wait_for(process.wait(), timeout=10)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _until(check: Callable[[], Awaitable[bool]], *, within_s: float) -> None:
    """Poll an async predicate (bounded); the event loop keeps serving the emulator meanwhile."""
    deadline = asyncio.get_running_loop().time() + within_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def _holder(engine: AsyncEngine) -> tuple[int, str | None]:
    async with engine.connect() as connection:
        row = (
            await connection.execute(text("SELECT epoch, holder FROM leadership WHERE id = 1"))
        ).one()
    return int(row.epoch), row.holder


async def _actors(sessions: async_sessionmaker[AsyncSession], key: str) -> list[tuple[str, str]]:
    async with sessions() as session:
        detail = await jobs.get_job(session, key)
    assert detail is not None, f"{key} never reached the queue"
    return [(str(e.kind), e.actor) for e in detail.history]


@pytest.fixture
async def pair(
    harness: Harness, database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Process, Process]]:
    (tmp_path / "tokens.yaml").write_text(
        yaml.safe_dump({"tokens": {TOKEN: {"user": "admin", "roles": ["cluster-admin"]}}})
    )
    (tmp_path / "kubeconfig").write_text(json.dumps(harness.cluster.kubeconfig()))
    chosen = harness.settings.model_dump(mode="json", include=SETTINGS_IN_FILE)
    (tmp_path / "gangq.yaml").write_text(yaml.safe_dump(chosen))
    processes = (
        Process("a", workdir=tmp_path, database_url=database_url),
        Process("b", workdir=tmp_path, database_url=database_url),
    )
    try:
        yield processes
    finally:
        for process in processes:
            await process.stop()
        for process in processes:
            sys.stderr.write(f"--- gangq run {process.name} ---\n{process.log.read_text()}\n")


async def test_the_follower_takes_over_within_15_s_of_a_sigkill(
    harness: Harness, engine: AsyncEngine, pair: tuple[Process, Process]
) -> None:
    first, second = pair
    sessions = database.session_factory(engine)
    await first.start()
    await _until(lambda: _is(first.leads, expected=True), within_s=20)
    await second.start()
    await _until(lambda: _is(second.leads, expected=False), within_s=20)

    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("before", replicas=1, run_seconds=None),
    )
    await wait_for(lambda: harness.phase("before") == "Running")
    before = await _actors(sessions, "ml-train/before")
    assert {actor for _, actor in before} == {"controller-a"}
    assert [kind for kind, _ in before] == ["enqueued", "admitted", "started"]
    assert await second.leads() is False
    assert await _holder(engine) == (1, "a")

    assert first.process is not None
    first.process.send_signal(signal.SIGKILL)
    await first.process.wait()
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("after", replicas=1, run_seconds=None),
    )
    await wait_for(lambda: harness.phase("after") == "Running", within_s=15)

    assert await _holder(engine) == (2, "b")
    assert await second.leads() is True
    after = await _actors(sessions, "ml-train/after")
    assert {actor for _, actor in after} == {"controller-b"}
    assert await _actors(sessions, "ml-train/before") == before


async def _is(check: Callable[[], Awaitable[bool | None]], *, expected: bool) -> bool:
    """True once the process answers and its leader gauge says `expected`."""
    return await check() is expected
