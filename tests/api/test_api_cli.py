"""`gangq jobs | job | queues | tenants | capacity` against the API served over real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time

import api_scenario
import pytest
from api_scenario import CLUSTER_ADMIN, QUOTA_ADMIN, T0, VIEWER_A, VIEWER_B, hold_a_reservation
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue import cli
from gangq.queue.store import jobs
from gangq.queue.store.models import JobRow


async def gangq(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the command in a thread (its HTTP calls block) and return exit code and output."""
    try:
        await asyncio.to_thread(cli.main, list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


async def test_jobs_table_for_a_viewer(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await gangq(capsys, "jobs", "--server", server, "--token", VIEWER_A)
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split() == [
        *("JOB", "TENANT", "TIER", "PHASE", "POS", "GANG", "WAITING", "ETA", "REASON")
    ]
    assert [row.split()[:6] for row in rows] == [
        ["team-a/a-big", "team-a", "training", "Queued", "1", "2x4"],
        ["team-a/a-small", "team-a", "training", "Admitted", "-", "1x2"],
    ]
    assert rows[0].endswith(
        "quota: tenant team-a uses 2/4 nominal, borrowing limit 4, job needs 8 gpu.nvidia.com"
    )


async def test_jobs_json_with_filters(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANGQ_SERVER", server)
    monkeypatch.setenv("GANGQ_TOKEN", CLUSTER_ADMIN)
    code, out, _ = await gangq(capsys, "jobs", "--phase", "Admitted", "--json")
    assert code == 0
    page = json.loads(out)
    assert page["total"] == 2
    assert {j["name"] for j in page["items"]} == {"a-small", "b-one"}


async def test_one_job_with_placement_and_history(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await gangq(
        capsys, "job", "team-a/a-small", "--server", server, "--token", VIEWER_A
    )
    assert code == 0
    assert "Phase:     Admitted" in out
    assert "Gang:      1 x 2 gpu.nvidia.com" in out
    assert "Size:      1/1 replicas" in out
    # No runs of its shape yet: the prediction is the runtime bound; no checkpoint reported.
    assert "Predicted: ~1h00m (ends ~" in out
    lost = next(line for line in out.splitlines() if line.startswith("Lost work:"))
    assert lost.endswith(" device-h if evicted now (since the start)")
    placement = out.split("Placement:\n")[1].split("\n\n")[0]
    assert lines(placement)[0] == ["REPLICA", "NODE", "DEVICES"]
    assert lines(placement)[1][0] == "0"
    history = out.split("History:\n")[1]
    assert [row[1] for row in lines(history)[1:]] == ["enqueued", "admitted"]


async def test_a_failed_job_shows_why_and_each_failed_replica(
    server: str,
    capsys: pytest.CaptureFixture[str],
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    failure = {"replica": 0, "node": "node-0", "reason": "OOMKilled", "exitCode": 137}
    why = "replica 0 on node-0 exited with code 137 (OOMKilled); 0 of 0 restarts used"
    async with session_factory() as session, session.begin():
        await jobs.start_all(session, [jobs.Start("team-a/a-small")], at=time.time(), actor="test")
        await jobs.finish(
            session,
            "team-a/a-small",
            succeeded=False,
            at=time.time(),
            actor="test",
            reason=why,
            cause="OOMKilled",
            failures=[{**failure, "message": "CUDA out of memory"}],
        )
    code, out, _ = await gangq(
        capsys, "job", "team-a/a-small", "--server", server, "--token", VIEWER_A
    )
    assert code == 0
    assert f"Reason:    {why}" in out
    assert "Placement:" not in out
    ran = out.split("Last attempt ran on (devices released):\n")[1].split("\n\n")[0]
    assert lines(ran)[0] == ["REPLICA", "NODE", "DEVICES"]
    assert lines(ran)[1][0] == "0" and lines(ran)[1][1].startswith("node-")
    failed = out.split("Failed replicas:\n")[1]
    assert lines(failed)[1][1:] == [
        "0",
        "node-0",
        "137",
        "OOMKilled",
        "CUDA",
        "out",
        "of",
        "memory",
    ]


async def test_a_reserved_job_shows_its_eta(
    server: str,
    capsys: pytest.CaptureFixture[str],
    session_factory: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    await hold_a_reservation(session_factory, database_url, started=time.time())
    code, out, _ = await gangq(capsys, "jobs", "--server", server, "--token", VIEWER_B)
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.startswith("team-b/b-wide"))
    assert row[7] in ("59m", "1h00m")
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-wide", "--server", server, "--token", VIEWER_B
    )
    assert code == 0
    eta = next(line for line in out.splitlines() if line.startswith("ETA:"))
    assert eta.split()[1] in ("~59m", "~1h00m") and "reserved start" in eta
    code, out, _ = await gangq(
        capsys, "job", "team-a/a-big", "--server", server, "--token", VIEWER_A
    )
    assert "ETA:       -" in out


async def test_a_job_shows_its_pod_groups_as_kube_scheduler_left_them(
    server: str,
    capsys: pytest.CaptureFixture[str],
    session_factory: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    await hold_a_reservation(session_factory, database_url, started=time.time())
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-wide", "--server", server, "--token", VIEWER_B
    )
    assert code == 0
    table = out.split("Pod groups:\n", 1)[1].split("\n\n", 1)[0]
    header, row = table.splitlines()
    assert header.split() == ["POD", "GROUP", "MIN", "SCHEDULED", "MESSAGE"]
    assert row.split() == ["b-wide-1a2b3c-0-1", "2", "False", "pod", "group", "is", "unschedulable"]
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-wide", "--server", server, "--token", VIEWER_B, "--json"
    )
    assert json.loads(out)["podGroups"] == [
        {
            "name": "b-wide-1a2b3c-0-1",
            "minCount": 2,
            "scheduled": "False",
            "reason": "Unschedulable",
            "message": "pod group is unschedulable",
            "since": "2026-01-01T00:00:10Z",
        }
    ]
    code, out, _ = await gangq(
        capsys, "job", "team-a/a-big", "--server", server, "--token", VIEWER_A
    )
    assert code == 0 and "Pod groups:" not in out


async def test_an_elastic_job_shows_the_size_it_started_at_and_its_range(
    server: str,
    capsys: pytest.CaptureFixture[str],
    session_factory: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    """Of at most 4 replicas, one per node, the scenario's one node with free devices holds
    one; the maximum could never fit its two schedulable nodes."""
    elastic = dataclasses.replace(
        api_scenario.job("team-b/b-elastic", "team-b", replicas=4, devices=1, at=T0 + 5),
        min_replicas=1,
    )
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [elastic], actor="test", now=T0 + 5)
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-elastic", "--server", server, "--token", VIEWER_B
    )
    assert "Size:      - (elastic, 1 to 4)" in out
    await api_scenario.decide(session_factory, database_url, now=T0 + 20)
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-elastic", "--server", server, "--token", VIEWER_B
    )
    assert code == 0
    assert "Size:      1/4 replicas (elastic, 1 to 4)" in out
    assert "Gang:      4 x 1 gpu.nvidia.com" in out
    async with session_factory() as session, session.begin():
        # as a grow from 1 to 2 replicas under way leaves the row (the store's grows.write)
        await session.execute(
            update(JobRow).where(JobRow.name == "b-elastic").values(grown_from=JobRow.size, size=2)
        )
    code, out, _ = await gangq(
        capsys, "job", "team-b/b-elastic", "--server", server, "--token", VIEWER_B
    )
    assert "Size:      1/4 replicas (elastic, 1 to 4), growing to 2" in out


async def test_a_gang_chosen_to_shrink_shows_the_size_it_goes_to(
    server: str,
    capsys: pytest.CaptureFixture[str],
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    async with session_factory() as session, session.begin():
        await session.execute(
            update(JobRow)
            .where(JobRow.name == "a-small")
            .values(evicting=True, shrink_to=1, size=1)
        )
    code, out, _ = await gangq(
        capsys, "job", "team-a/a-small", "--server", server, "--token", VIEWER_A
    )
    assert code == 0
    assert "Size:      1/1 replicas, shrinking to 1" in out


async def test_errors_say_what_to_do(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = await gangq(
        capsys, "job", "team-b/b-one", "--server", server, "--token", VIEWER_A
    )
    assert (code, err.strip()) == (
        2,
        "gangq: error: GET /v1/jobs/team-b/b-one: 404 no job team-b/b-one that you may read",
    )
    code, _, err = await gangq(capsys, "queues", "--server", server, "--token", "")
    assert code == 2
    assert err.strip().endswith(
        "401 send a bearer token: Authorization: Bearer TOKEN (pass --token or set GANGQ_TOKEN)"
    )
    code, _, err = await gangq(capsys, "job", "no-slash", "--server", server)
    assert (code, err.strip()) == (
        2,
        "gangq: error: the job must be given as NAMESPACE/NAME, got 'no-slash'",
    )


async def test_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    code, _, err = await gangq(capsys, "queues", "--server", f"http://127.0.0.1:{port}")
    assert code == 2
    assert f"cannot reach gangq at http://127.0.0.1:{port}" in err
    assert "(set --server or GANGQ_SERVER)" in err


async def test_queues_and_tenants_tables(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await gangq(capsys, "queues", "--server", server, "--token", CLUSTER_ADMIN)
    assert code == 0
    table = lines(out)
    assert table[0] == ["TIER", "TENANT", "PENDING", "ADMITTED", "OLDEST", "WAIT"]
    assert [row[:4] for row in table[1:]] == [
        ["training", "team-a", "1", "1"],
        ["training", "team-b", "0", "1"],
    ]
    code, out, _ = await gangq(capsys, "tenants", "--server", server, "--token", VIEWER_A)
    assert code == 0
    assert lines(out)[1:] == [["team-a", "gpu.nvidia.com", "4", "4", "1", "(all)"]]


async def test_tenants_set_changes_one_class_and_keeps_the_rest(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = ("--server", server, "--token", QUOTA_ADMIN)
    code, out, _ = await gangq(
        capsys,
        "tenants",
        "set",
        "team-a",
        "--device-class",
        "nic.example.com",
        "--nominal",
        "2",
        *admin,
    )
    assert code == 0
    code, out, _ = await gangq(
        capsys,
        "tenants",
        "set",
        "team-a",
        "--device-class",
        "gpu.nvidia.com",
        "--borrowing-limit",
        "4",
        "--weight",
        "2",
        "--tiers",
        "training,small",
        *admin,
    )
    assert code == 0
    assert lines(out)[1:] == [
        ["team-a", "nic.example.com", "2", "0", "1", "(all)"],
        ["team-a", "gpu.nvidia.com", "4", "4", "2", "training,small"],
    ]
    code, _, err = await gangq(
        capsys, "tenants", "set", "team-z", "--device-class", "gpu.nvidia.com", *admin
    )
    assert (code, err.strip()) == (
        2,
        "gangq: error: tenant team-z has no quota for gpu.nvidia.com yet: give --nominal",
    )
    code, _, err = await gangq(
        capsys,
        "tenants",
        "set",
        "team-a",
        "--device-class",
        "gpu.nvidia.com",
        "--nominal",
        "-3",
        *admin,
    )
    assert code == 2
    assert "422" in err and "greater than or equal to 0" in err
    code, _, err = await gangq(
        capsys, "tenants", "set", "team-a", "--device-class", "gpu.nvidia.com", "--nominal", "9",
        "--server", server, "--token", VIEWER_A,
    )  # fmt: skip
    assert code == 2
    assert "403 user 'ana' may not change quotas" in err


async def test_capacity_table(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await gangq(
        capsys, "capacity", "--nodes", "--server", server, "--token", VIEWER_A
    )
    assert code == 0
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 4
    classes = lines(blocks[0])
    assert classes[0][-3:] == ["TAINTED", "LARGEST", "GANG"]
    # 16 GPUs: 4 free, 4 reserved, 0 held, 4 cordoned, 4 on the tainted node-4.
    assert classes[1][:7] == ["gpu.nvidia.com", "16", "4", "4", "0", "4", "4"]
    assert [row[0] for row in lines(blocks[1])[1:]] == ["gangq.dev/rack=r1", "gangq.dev/rack=r2"]
    assert lines(blocks[2])[1:] == [
        ["node-4", "gpu.nvidia.com", "4", "gpu-maintenance=true:NoSchedule"]
    ]
    assert [row[0] for row in lines(blocks[3])[1:]] == ["node-1", "node-2", "node-3", "node-4"]
