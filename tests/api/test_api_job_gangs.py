"""A job's detail across its gangs and attempts: where a finished job ran, and scale-up gangs
(PRODUCT §5) listed by `/v1/jobs`, readable by their own name and shown inside their job."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
from api_scenario import T0, VIEWER_A, bearer, decide, job
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from test_api_openapi import schema

from gangq.queue.kube import objects, scale
from gangq.queue.store import jobs, timestamps
from gangq.queue.store.models import JobRow


async def detail(api: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """The detail at `path`, checked against the operation's schema in the published OpenAPI."""
    response = await api.get(path, headers=bearer(VIEWER_A))
    assert response.status_code == 200, response.text
    operation = schema.find_operation_by_label("GET /v1/jobs/{namespace}/{name}")
    assert operation is not None
    operation.validate_response(response)
    body: dict[str, Any] = response.json()
    return body


async def test_a_finished_job_shows_where_its_last_attempt_ran(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    running = await detail(api, "/v1/jobs/team-a/a-small")
    assert running["lastPlacement"] == running["placement"] != []
    async with session_factory() as session, session.begin():
        await jobs.start_all(session, [jobs.Start("team-a/a-small")], at=T0 + 20, actor="test")
        await jobs.finish(
            session, "team-a/a-small", succeeded=True, at=T0 + 80, actor="test", reason="done"
        )
    finished = await detail(api, "/v1/jobs/team-a/a-small")
    assert finished["job"]["phase"] == "Succeeded"
    assert finished["placement"] == []
    assert finished["lastPlacement"] == running["placement"]


async def test_a_queued_job_never_admitted_ran_nowhere(api: httpx.AsyncClient) -> None:
    waiting = await detail(api, "/v1/jobs/team-a/a-big")
    assert waiting["placement"] == waiting["lastPlacement"] == []
    assert waiting["scaleUps"] == []


async def test_a_scale_up_gang_is_listed_readable_and_shown_inside_its_job(
    api: httpx.AsyncClient,
    session_factory: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    base = job("team-a/a-small", "team-a", replicas=1, devices=2, at=T0)
    added = scale.extension(base, first=1, add=1, now=T0 + 30)
    async with session_factory() as session, session.begin():
        await jobs.start_all(session, [jobs.Start("team-a/a-small")], at=T0 + 20, actor="test")
        await jobs.enqueue(session, [added], actor="test", now=T0 + 30)
    await decide(session_factory, database_url, now=T0 + 40)

    listed = (await api.get("/v1/jobs?tenant=team-a", headers=bearer(VIEWER_A))).json()
    entry = {item["name"]: item for item in listed["items"]}["a-small+1"]
    assert entry["scaleUp"] == {"job": "a-small", "firstReplica": 1}

    gang = await detail(api, "/v1/jobs/team-a/a-small+1")
    assert gang["job"]["phase"] == "Admitted"
    assert gang["job"]["scaleUp"] == {"job": "a-small", "firstReplica": 1}
    assert gang["scaleUps"] == []
    # Replicas are numbered as the job's pods are: the gang's first is the job's replica 1.
    [replica] = gang["placement"]
    assert replica["replica"] == 1 and len(replica["devices"]) == 2
    assert [e["kind"] for e in gang["history"]] == ["enqueued", "admitted"]

    whole = await detail(api, "/v1/jobs/team-a/a-small")
    assert whole["job"]["scaleUp"] is None
    assert [r["replica"] for r in whole["placement"]] == [0]
    [inside] = whole["scaleUps"]
    assert inside["job"]["name"] == "a-small+1"
    assert inside["placement"] == gang["placement"]
    assert inside["history"] == gang["history"]


async def test_a_scale_up_of_another_incarnation_is_not_shown(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    """A job deleted and created again under its name gets a new uid: the old job's
    scale-up gangs are not the new one's."""
    earlier = dataclasses.replace(
        job("team-a/a-small", "team-a", replicas=1, devices=2, at=T0), uid="an-earlier-uid"
    )
    stale = scale.extension(earlier, first=1, add=1, now=T0 + 5)
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [stale], actor="test", now=T0 + 5)
    whole = await detail(api, "/v1/jobs/team-a/a-small")
    assert whole["scaleUps"] == []


async def test_a_name_no_entry_can_have_is_refused_with_the_reason(api: httpx.AsyncClient) -> None:
    for name in ("a-small+0", "a-small+", "a-small+x", "+1"):
        response = await api.get(f"/v1/jobs/team-a/{name}", headers=bearer(VIEWER_A))
        assert response.status_code == 422, name
        [problem] = response.json()["detail"]
        assert problem["loc"] == ["path", "name"]


async def test_a_victim_asked_for_a_checkpoint_says_until_when_it_runs(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    async with session_factory() as session, session.begin():
        await session.execute(
            update(JobRow)
            .where(JobRow.namespace == "team-a", JobRow.name == "a-small")
            .values(
                evicting=True,
                evicted_for="team-b/b-urgent",
                checkpoint_requested_at=timestamps.to_datetime(T0 + 30),
                evict_by=timestamps.to_datetime(T0 + 150),
            )
        )
    asked = (await detail(api, "/v1/jobs/team-a/a-small"))["job"]
    requested, deadline = objects.rfc3339(T0 + 30), objects.rfc3339(T0 + 150)
    assert asked["evicting"] and asked["phase"] == "Admitted"
    assert asked["checkpointRequestedAt"] is not None and asked["evictBy"] is not None
    assert asked["reason"] == {
        "code": "preemption",
        "message": f"checkpoint requested at {requested} for a job of another tenant, "
        f"evicting by {deadline}",
    }
    listed = (await api.get("/v1/jobs", headers=bearer(VIEWER_A))).json()["items"]
    assert [j["reason"] for j in listed if j["name"] == "a-small"] == [asked["reason"]]


async def test_a_gang_chosen_to_shrink_says_to_what_size_and_until_when_it_runs_whole(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    async with session_factory() as session, session.begin():
        await session.execute(
            update(JobRow)
            .where(JobRow.namespace == "team-a", JobRow.name == "a-small")
            .values(
                evicting=True,
                shrink_to=1,
                evicted_for="team-b/b-urgent",
                checkpoint_requested_at=timestamps.to_datetime(T0 + 30),
                evict_by=timestamps.to_datetime(T0 + 150),
            )
        )
    asked = (await detail(api, "/v1/jobs/team-a/a-small"))["job"]
    requested, deadline = objects.rfc3339(T0 + 30), objects.rfc3339(T0 + 150)
    assert (asked["evicting"], asked["shrinkingTo"]) == (True, 1)
    assert asked["reason"]["message"] == (
        f"checkpoint requested at {requested} for a job of another tenant, "
        f"shrinking to 1 replicas by {deadline}"
    )
    async with session_factory() as session, session.begin():
        await session.execute(
            update(JobRow).where(JobRow.name == "a-small").values(evicting=False, shrink_to=None)
        )
    assert (await detail(api, "/v1/jobs/team-a/a-small"))["job"]["shrinkingTo"] is None
