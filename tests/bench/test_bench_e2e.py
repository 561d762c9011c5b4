"""`gangq bench e2e`: the controller, the emulator and PostgreSQL on a small run (subprocess)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any, NoReturn

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gangq.queue.bench import endtoend, releases, served_cluster, writes
from gangq.queue.cli import main
from gangq.queue.demo import runner, serviceaccount

RUN_CLI = "from gangq.queue.cli import main; main()"
SMALL_RUN = (
    *("--jobs", "40", "--nodes", "16", "--tenants", "5", "--timeout", "60", "--rate", "20"),
    *("--history", "30"),
)
KEYS = {
    "jobs",
    "released",
    "duration_s",
    "jobs_per_s",
    "release_p50_ms",
    "release_p99_ms",
    "release_skew_p99_ms",
    "api_writes_per_job",
    "api_writes_per_job_total",
    "controller_cpu_ms_per_job",
    "controller_startup_cpu_s",
    "history_jobs",
    "emulator_writes_per_s",
    "client_request_cpu_us",
    "controller_cpu_requests_per_job",
    "pod_lists",
    "pod_lists_with_a_gang_partly_bound",
}


@pytest.mark.parametrize(
    "arguments",
    [["--jobs", "0"], ["--timeout", "-1"], ["--nodes", "0"], ["--rate", "-2"], ["--history", "-1"]],
    ids=["no-jobs", "negative-timeout", "no-nodes", "negative-rate", "negative-history"],
)
def test_bad_arguments_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "e2e", *arguments])
    assert exit_info.value.code == 2
    assert "must be" in capsys.readouterr().err


def test_a_pod_counts_as_released_once_its_gates_are_gone() -> None:
    observed = releases.Releases()
    observed.expect("ns/job", replicas=2)
    observed.created("ns/job", at=1.0)

    def pod(name: str, *, gated: bool) -> dict[str, object]:
        gates = [{"name": "gangq.dev/admission"}] if gated else []
        labels = {"gangq.dev/job-name": "job"}
        return {
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"schedulingGates": gates},
        }

    observed.on_pod(pod("job-0", gated=True), at=1.1)
    observed.on_pod(pod("job-0", gated=False), at=1.5)
    assert observed.done == 0
    observed.on_pod(pod("job-1", gated=False), at=1.52)
    observed.on_pod(pod("job-1", gated=False), at=9.0)
    figures = observed.figures(now=10.0)
    assert figures["released"] == 1
    assert figures["release_p99_ms"] == pytest.approx(520.0)
    assert figures["release_skew_p99_ms"] == pytest.approx(20.0)


def test_writes_are_read_from_the_api_servers_request_counters() -> None:
    page = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{verb="POST",resource="pods",subresource="",code="201"} 3',
            'apiserver_request_total{verb="POST",resource="pods",subresource="",code="409"} 2',
            'apiserver_request_total{verb="PATCH",resource="trainingjobs",subresource="status",'
            'code="200"} 4',
            'apiserver_request_total{verb="LIST",resource="pods",subresource="",code="200"} 9',
        ]
    )
    counted = writes.parse(page + "\n")
    assert counted == {"POST pods": 3, "PATCH trainingjobs/status": 4}
    figures = writes.per_job(Counter(), counted, jobs=2, submitted=Counter({"POST pods": 1}))
    assert figures == {
        "api_writes_per_job": {"PATCH trainingjobs/status": 2.0, "POST pods": 1.0},
        "api_writes_per_job_total": 3.0,
    }


def test_a_gang_is_partly_bound_when_some_but_not_all_of_its_pods_have_a_node() -> None:
    def pod(job: str, replica: int, *, node: str, admission: str = "t1") -> dict[str, object]:
        labels = {"gangq.dev/job-name": job, "gangq.dev/gang": f"uid-{job}"}
        return {
            "metadata": {
                "name": f"{job}-{replica}",
                "namespace": "ns",
                "labels": labels,
                "annotations": {"gangq.dev/admitted-at": admission},
            },
            "spec": {"nodeName": node} if node else {},
        }

    listed = [pod("a", 0, node="n1"), pod("a", 1, node="n2"), pod("b", 0, node="")]
    assert releases.partly_bound(listed) == 0
    assert releases.partly_bound([*listed, pod("b", 1, node="n3")]) == 1
    # A kept pod of an earlier attempt is another attempt, not a member left unbound.
    assert releases.partly_bound([*listed, pod("a", 2, node="", admission="t0")]) == 0


@pytest.mark.slow
def test_a_small_run_releases_every_job(server_url: str) -> None:
    """Run with `--podgroups`: the same figures without and with PodGroups."""
    result = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "bench", "e2e", "--json", "--podgroups", *SMALL_RUN],
        env={**os.environ, "DATABASE_URL": server_url},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    both = json.loads(result.stdout)
    assert set(both) == {"without_podgroups", "with_podgroups"}
    assert both["with_podgroups"]["pod_lists_with_a_gang_partly_bound"] == 0
    for figures in both.values():
        _small_run_figures(figures)
    assert result.stderr.count("submitting 40 jobs") == 2


def _small_run_figures(figures: dict[str, Any]) -> None:
    assert set(figures) >= KEYS
    assert figures["pod_lists"] > 0
    assert figures["jobs"] == figures["released"] == 40
    assert figures["history_jobs"] == 30, "kept jobs that ended before are not counted"
    assert figures["duration_s"] > 0 and figures["jobs_per_s"] > 0
    assert figures["api_writes_per_job"]["POST pods"] >= 1
    assert figures["api_writes_per_job_total"] == pytest.approx(
        sum(figures["api_writes_per_job"].values()), abs=0.1
    )
    assert figures["controller_cpu_ms_per_job"] > 0 and figures["emulator_writes_per_s"] > 0
    assert figures["client_request_cpu_us"] > 0
    assert figures["controller_startup_cpu_s"] > 0, "the start is counted apart, not dropped"
    assert figures["controller_cpu_requests_per_job"] == pytest.approx(
        figures["controller_cpu_ms_per_job"] * 1000 / figures["client_request_cpu_us"], rel=0.05
    )
    assert 0 < figures["release_p50_ms"] <= figures["release_p99_ms"]
    assert 0 <= figures["release_skew_p99_ms"] <= figures["release_p99_ms"]
    assert figures["duration_s"] >= 39 / 20, "--rate 20 paces 40 jobs over at least 1.95 s"


class _Started(Exception):
    """Raised in place of starting the controller's process, once its command line is known."""


async def test_the_controller_runs_as_gangqs_service_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kubeconfig the bench hands its controller must be refused what deploy/base/rbac.yaml
    # does not grant: as admin, a permission missing there would pass the bench unnoticed.
    command: list[str] = []

    async def started(*arguments: str, **_: object) -> NoReturn:
        command.extend(arguments)
        raise _Started

    args = argparse.Namespace(cycle_interval=0.1, profile_controller=None)
    async with served_cluster.served_cluster(
        nodes=1, racks=1, crd=runner.default_crd(), ready_seconds=0.1
    ) as served:
        monkeypatch.setattr(asyncio, "create_subprocess_exec", started)
        async with contextlib.AsyncExitStack() as exits:
            with pytest.raises(_Started):
                await endtoend._start_controller(exits, args, served=served, url="unused")
        monkeypatch.undo()
        kubeconfig = next(a.removeprefix("--kubeconfig=") for a in command if "kubeconfig" in a)
        configuration = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        async with client.ApiClient(configuration) as api_client:
            core = client.CoreV1Api(api_client)
            await core.list_pod_for_all_namespaces()  # granted: the token authenticates
            namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name="not-gangqs"))
            with pytest.raises(ApiException) as refused:
                await core.create_namespace(namespace)
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert f'User "{serviceaccount.USER}" cannot create resource "namespaces"' in message
