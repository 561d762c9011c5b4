"""`gangq run`: refuses a schema that is behind, else serves the controller, API and metrics."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gangq.queue.cli import run as run_command
from gangq.queue.kube import resources
from gangq.queue.kube.client import Kube
from tests import databases
from tests.controller.conftest import Harness, training_job, wait_for


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_run_refuses_a_database_whose_schema_is_behind(
    server_url: str, tmp_path: Path
) -> None:
    async with databases.scratch(server_url, "gangq_test") as url:
        done = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-c",
                "from gangq.queue.cli import main; main()",
                "run",
                "--database-url",
                url,
                "--kubeconfig",
                str(tmp_path / "none"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert "run `gangq migrate`" in done.stderr


async def test_run_serves_the_api_and_metrics_and_admits_jobs(
    harness: Harness, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  admin-token-0123456789: {user: admin, roles: [cluster-admin]}\n")
    monkeypatch.setenv("GANGQ_TOKEN_FILE", str(tokens))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(harness.cluster.kubeconfig()))
    port, metrics_port = _free_port(), _free_port()
    settings = harness.settings.model_copy(
        update={"database_url": database_url, "kubeconfig": kubeconfig}
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_command.serve(
            settings, host="127.0.0.1", port=port, metrics_port=metrics_port, stop=stop
        )
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def healthy() -> bool:
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            for _ in range(200):
                if await healthy():
                    break
                await asyncio.sleep(0.05)
            kube: Kube = harness.kube
            await kube.create(
                resources.TRAINING_JOBS, "ml-train", training_job("served", run_seconds=None)
            )
            await wait_for(lambda: harness.phase("served") == "Running")
            scrape = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
            assert (await http.get("/metrics")).status_code == 404
            listed = await http.get(
                "/v1/jobs", headers={"Authorization": "Bearer admin-token-0123456789"}
            )
        assert listed.status_code == 200
        assert [item["name"] for item in listed.json()["items"]] == ["served"]
        assert "gangq_leader 1.0" in scrape
        assert 'gangq_devices{device_class="gpu.nvidia.com",state="reserved"} 16.0' in scrape
        assert (
            'gangq_tenant_devices{device_class="gpu.nvidia.com",kind="nominal",'
            'tenant="ml-train"} 16.0' in scrape
        )
        assert "gangq_release_skew_seconds_count 1.0" in scrape
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


def test_run_is_a_registered_command() -> None:
    from gangq.queue.cli import build_parser

    args = build_parser().parse_args(["run", "--port", "9999"])
    assert args.handler is run_command.run and args.port == 9999
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--port", "x"])
