"""`gangq bench soak`: a short seeded fault soak finds nothing wrong (subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gangq.queue.cli import main

RUN_CLI = "from gangq.queue.cli import main; main()"
SHORT_RUN = ("--minutes", "0.4", "--seed", "7", "--settle-seconds", "40")


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
        timeout=150,
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
    assert figures["faults_injected"].get("leader_kill", 0) >= 1, figures["faults_injected"]
    assert sum(figures["faults_injected"].values()) >= 8
    assert figures["replicas"]["unexpected_exits"] == 0
    assert figures["checks"] > 0 and figures["rest_checks"] > 0
