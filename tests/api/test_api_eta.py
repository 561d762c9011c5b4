"""The ETA of a queued job: the start its backfill reservation holds, in seconds from now."""

from __future__ import annotations

import time
from datetime import datetime

import httpx
from api_scenario import (
    CLUSTER_ADMIN,
    RUNTIME_S,
    VIEWER_A,
    VIEWER_B,
    bearer,
    hold_a_reservation,
)
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


async def test_a_reserved_job_shows_its_reserved_start_and_eta(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession], database_url: str
) -> None:
    started = time.time()
    # Both schedulable nodes hold a running gang until its runtime bound: 2 x 4 waits for both.
    reservation = await hold_a_reservation(session_factory, database_url, started=started)
    assert reservation.job == "team-b/b-wide"
    assert abs(reservation.start_at - (started + RUNTIME_S)) < 1e-3

    before = time.time()
    body = (await api.get("/v1/jobs/team-b/b-wide", headers=bearer(VIEWER_B))).json()["job"]
    after = time.time()
    shown = datetime.fromisoformat(body["reservedStartAt"]).timestamp()
    assert abs(shown - reservation.start_at) < 1e-3
    assert shown - after <= body["etaSeconds"] <= shown - before
    assert RUNTIME_S - 60 < body["etaSeconds"] <= RUNTIME_S

    listed = (await api.get("/v1/jobs?phase=Queued", headers=bearer(CLUSTER_ADMIN))).json()
    etas = {item["name"]: item["etaSeconds"] for item in listed["items"]}
    assert etas["a-big"] is None  # held back by its quota, which no release changes
    assert etas["b-wide"] is not None and 0 < etas["b-wide"] <= body["etaSeconds"]


async def test_a_job_without_a_reservation_has_no_eta(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/jobs/team-a/a-big", headers=bearer(VIEWER_A))).json()["job"]
    assert (body["reservedStartAt"], body["etaSeconds"]) == (None, None)
