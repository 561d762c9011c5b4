"""`gangq bench soak`: a short seeded fault soak finds nothing wrong (subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gangq.queue.bench import soak_replica
from gangq.queue.cli import main
from tests import databases

RUN_CLI = "from gangq.queue.cli import main; main()"
SHORT_RUN = ("--minutes", "0.6", "--seed", "7", "--settle-seconds", "40", "--postgres-failover")
"""Every fault kind once at least, the database's failovers included: a primary and standby of
the soak's own; the plain soak differs only in using a scratch database on the server."""


@pytest.mark.parametrize(
    "arguments",
    [["--minutes", "0"], ["--nodes", "2"], ["--settle-seconds", "-1"], ["--watch-window", "0"]],
    ids=["no-time", "too-few-nodes", "negative-settle", "no-window"],
)
def test_bad_arguments_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "soak", *arguments])
    assert exit_info.value.code == 2
    assert "must be" in capsys.readouterr().err


@pytest.mark.slow
def test_a_short_seeded_soak_has_no_violation_leak_stuck_job_or_asyncio_error(
    server_url: str,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "bench", "soak", "--json", *SHORT_RUN],
        env={**os.environ, "DATABASE_URL": server_url},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.stdout, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    found = {key: figures[key] for key in ("violations", "leaked_objects", "stuck_jobs")}
    assert found == {"violations": 0, "leaked_objects": 0, "stuck_jobs": 0}, figures["details"]
    assert figures["asyncio_errors"] == 0, figures["details"]["asyncio_errors"]
    assert result.returncode == 0
    jobs = figures["jobs"]
    assert jobs["submitted"] >= 10 and jobs["outcomes"].get("succeeded", 0) > 0
    assert {"small", "gang-2x8"} <= set(jobs["by_kind"])
    faults = figures["faults_injected"]
    assert {"leader_kill", "postgres_failover", "postgres_stale_promotion"} <= set(faults), faults
    assert sum(faults.values()) >= 8
    assert figures["replicas"]["unexpected_exits"] == 0
    assert figures["checks"] > 0 and figures["rest_checks"] > 0


@pytest.fixture
async def unmigrated_url(server_url: str) -> AsyncIterator[str]:
    async with databases.scratch(server_url, "gangq_unmigrated") as url:
        yield url


async def test_a_replica_that_dies_leaves_its_stderr_and_last_lines(
    tmp_path: Path, unmigrated_url: str
) -> None:
    """A replica that cannot start (its database was never migrated) exits 1 on its own: the
    exit is reported with its status, the file that keeps that start's whole stderr and its
    last lines, and told on the soak's stderr. (A database that does not answer yet is
    waited for instead: `gangq run` outlives a failover.)"""
    heard: list[str] = []
    told = asyncio.Event()

    def hear(text: str) -> None:
        heard.append(text)
        told.set()

    logs = tmp_path / "logs"
    logs.mkdir()
    replica = soak_replica.Replica(
        "replica-x",
        unmigrated_url,
        tmp_path / "kubeconfig",
        tmp_path / "tokens.yaml",
        logs,
        hear,
    )
    await replica.start()
    async with asyncio.timeout(60):
        await told.wait()
    (found,) = replica.exits
    assert (found.replica, found.start, found.status) == ("replica-x", 1, 1)
    assert found.log == str(logs / "replica-x.1.log")
    kept = await asyncio.to_thread(Path(found.log).read_text)
    assert kept.endswith("--- replica-x exited with 1\n")
    assert "SchemaBehindError" in found.tail[-1] and found.tail[-1] in kept
    assert replica.crashed and replica.errors == [
        f"exited unexpectedly with status 1 (start 1, {found.log})"
    ]
    assert heard[0].startswith("replica-x start 1 exited with status 1")
    assert heard[0].endswith(found.tail[-1])
