"""`gangq demo`: refused input, and the whole reference scenario in a subprocess (the long test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gangq.queue.cli import main

RUN_CLI = "from gangq.queue.cli import main; main()"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--scenario", "{tmp}"], "no scenario.yaml in"),
        (["--api-port", "70000"], "--api-port must be between 0 and 65535"),
    ],
    ids=["no-scenario", "bad-port"],
)
def test_bad_arguments_are_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *(a.format(tmp=tmp_path) for a in arguments)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_the_reference_scenario_keeps_every_invariant_and_tells_the_story(
    server_url: str,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "demo", "--json"],
        env={**os.environ, "DATABASE_URL": server_url},
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    body = json.loads(result.stdout)
    failed = [c for c in body["checks"] if not c["ok"]]
    assert result.returncode == 0, (failed, result.stderr[-3000:])
    assert body["ok"] is True and body["timed_out"] is False
    assert body["duration_s"] <= 90
    assert body["partial_starts"] == 0
    assert body["double_allocations"] == 0
    assert body["unique_device_ids"] is True
    assert body["device_ids_checked"] >= 48
    assert 0 <= body["max_release_skew_ms"] < 1000
    jobs = {f"{job['namespace']}/{job['name']}": job for job in body["jobs"]}
    assert len(jobs) == 21
    assert jobs["inference/llm-prod"]["replicas"] == 3
    first, second = jobs["ml-train/train-llm"], jobs["ml-train/train-llm-2"]
    assert second["admitted_at"] > first["started_at"]
    assert first["preemptions"] == second["preemptions"] == 0
    assert second["finished_at"] is not None
    small = [job for key, job in jobs.items() if key.startswith("ci/")]
    assert any(job["preemptions"] > 0 for job in small)
    assert all(job["phase"] == "Succeeded" for job in small)
    assert any(job["started_at"] < second["started_at"] for job in small)
    assert "step 6: llm-prod scaled to 3 replicas" in result.stderr
    research = [job for key, job in jobs.items() if key.startswith("research/")]
    assert body["slice_jobs"] == len(research) == 6
    assert all(job["on_slices"] and job["phase"] == "Succeeded" for job in research)
    assert not any(job["on_slices"] for key, job in jobs.items() if not key.startswith("research/"))
    assert body["counter_overcommits"] == 0
    whole_gpu_jobs = [job for key, job in jobs.items() if not key.startswith("research/")]
    assert not any(node in ("gpu-8", "gpu-9") for job in whole_gpu_jobs for node in job["nodes"])
    assert {node for job in research for node in job["nodes"]} == {"gpu-8", "gpu-9"}
