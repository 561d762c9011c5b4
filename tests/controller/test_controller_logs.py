"""What `gangq run` logs: JSON lines an operator's pipeline can read, expected races at DEBUG
and counted, state changes at INFO, and nothing alarming on a clean stop.

The command runs as a subprocess against the emulator (in this event loop) and PostgreSQL; the
emulator's fault injection supplies the races a busy cluster produces.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from gangq.queue.kube import resources
from tests.controller.conftest import Harness, training_job, wait_for

EXPECTED_FIELDS = {"time", "level", "logger", "message"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _scrape(port: int) -> str:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        for _ in range(400):
            try:
                return (await http.get("/metrics")).text
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise AssertionError("gangq run never served /metrics")


async def test_gangq_run_logs_json_lines_races_at_debug_and_stops_quietly(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "gangq.yaml"
    config.write_text(yaml.safe_dump(harness.settings.model_dump(mode="json")))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(harness.cluster.kubeconfig()))
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  admin-token-0123456789: {user: admin, roles: [cluster-admin]}\n")
    port, metrics_port = _free_port(), _free_port()
    # Races of a busy cluster: stale TrainingJob copies (409) and a failing API server (500).
    harness.cluster.faults.fail_next(2, code=409, verb="patch", resource="trainingjobs")
    harness.cluster.faults.fail_next(1, code=500, verb="create", resource="pods")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from gangq.queue.cli import main; main()",
        "run",
        *("--config", str(config), "--kubeconfig", str(kubeconfig)),
        *("--database-url", database_url, "--host", "127.0.0.1", "--port", str(port)),
        *("--metrics-port", str(metrics_port)),
        *("--log-level", "debug", "--log-format", "json"),
        env={"GANGQ_TOKEN_FILE": str(tokens), "PATH": str(Path(sys.executable).parent)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await _scrape(metrics_port)
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("logged", run_seconds=None)
        )
        await wait_for(lambda: harness.phase("logged") == "Running", within_s=30)
        scrape = await _scrape(metrics_port)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert harness.cluster.faults.injected == 3

    assert 'gangq_api_retries_total{reason="conflict",resource="trainingjobs"} 2.0' in scrape
    assert 'gangq_api_retries_total{reason="server_error",resource="pods"} 1.0' in scrape

    lines: list[dict[str, Any]] = [json.loads(line) for line in stderr.decode().splitlines()]
    assert lines and all(line.keys() >= EXPECTED_FIELDS for line in lines)
    gangq = [line for line in lines if line["logger"].startswith("gangq.")]
    trouble = [line for line in lines if line["level"] in {"WARNING", "ERROR", "CRITICAL"}]
    assert trouble == []  # races are expected, and so is a clean stop
    retried = [line for line in gangq if "tried again" in line["message"]]
    assert {line["level"] for line in retried} == {"DEBUG"}
    assert len(retried) == 3
    about_job = [line for line in gangq if line.get("job") == "logged"]
    assert about_job and {line["namespace"] for line in about_job} == {"ml-train"}
    cycles = [line for line in gangq if line["message"].startswith("cycle at")]
    assert {line["level"] for line in cycles if " 0 admitted, 0 preempting" in line["message"]} == {
        "DEBUG"
    }
    assert [line["level"] for line in cycles if " 1 admitted" in line["message"]] == ["INFO"]
