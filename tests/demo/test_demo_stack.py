"""The embedded parts: a scratch database per run and the REST API served on localhost."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from gangq.api.app import create_app
from gangq.api.settings import ApiSettings, AuthMode
from gangq.queue.demo import ledger, probe, stack
from gangq.queue.store import database


async def databases(server_url: str) -> set[str]:
    connection = await asyncpg.connect(database.libpq_url(server_url))
    try:
        rows = await connection.fetch("SELECT datname FROM pg_database")
    finally:
        await connection.close()
    return {row["datname"] for row in rows}


async def test_each_run_gets_a_fresh_database_that_is_dropped_after(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(database.ENVIRONMENT_VARIABLE, server_url)
    async with stack.scratch_database() as url:
        name = url.rsplit("/", 1)[-1]
        assert name.startswith("gangq_demo_")
        assert name in await databases(server_url)
    assert name not in await databases(server_url)


async def test_the_api_is_served_with_a_run_token_and_probed_over_http(
    database_url: str, tmp_path: Path
) -> None:
    token, token_file = stack.admin_token_file(tmp_path)
    settings = ApiSettings(
        database_url=database_url, auth_mode=AuthMode.TOKEN_FILE, token_file=token_file
    )
    async with stack.api_server(create_app(settings)) as served:
        answers = probe.Probe(served.base_url, token, metrics_url=served.metrics_url)
        assert await answers.get("/healthz") == (200, {"status": "ok"})
        assert (await probe.Probe(served.base_url, "x" * 32).get("/v1/jobs"))[0] == 401
        assert await answers.pending_reason("ml-train/none") == (
            "GET /v1/jobs/ml-train/none answered 404"
        )
        checks = {c.name: c for c in await answers.checks(ledger.Ledger({}))}
    jobs = checks["API /v1/jobs agrees with the TrainingJobs"]
    assert (jobs.ok, jobs.detail) == (False, "0 jobs and 0 scale-up gang(s) listed, 0 observed")
    assert not checks["API /v1/capacity counts every published device"].ok
    assert (await probe.Probe(served.base_url, token).get("/healthz"))[0] == 0
