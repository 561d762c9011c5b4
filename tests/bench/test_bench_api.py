"""`gangq bench api`: a short run prints the cycle delay and what the clients got (subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUN_CLI = "from gangq.queue.cli import main; main()"


def test_a_short_run_reports_the_cycle_delay_of_each_hosting(database_url: str) -> None:
    server = database_url.rsplit("/", 1)[0] + "/postgres"
    arguments = ["--seconds", "1", "--clients", "5", "--body-mb", "0.1", "--json"]
    finished = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "bench", "api", *arguments],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "DATABASE_URL": server},
    )
    assert finished.returncode == 0, finished.stderr
    figures = json.loads(finished.stdout)
    assert set(figures["hostings"]) == {"before", "same-loop", "own-thread"}
    for result in figures["hostings"].values():
        assert result["cycles"] > 0 and result["requests"] > 0
        assert result["cycle_delay_p50_ms"] <= result["cycle_delay_p99_ms"]
        assert result["cycle_delay_p99_ms"] <= result["cycle_delay_max_ms"]
    # Unauthenticated large bodies are refused before they are read once the guard is in.
    guarded = figures["hostings"]["own-thread"]["answers"]
    assert "500" not in guarded
    assert guarded.get("401", 0) + guarded.get("413", 0) + guarded.get("ReadError", 0) > 0
