"""Why a job failed, as kubectl shows it: for each failure kind, `status.reason`, the Failed
condition (CamelCase reason, human message), a Warning event and the Reason printer column of
`kubectl get tj` all say which replica, on which node, and the exit code or cause; the pods of
the last attempt stay readable, and a TTL deletes a finished job with its pods."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gangq.queue.kube import resources
from gangq.queue.store import database, jobs
from tests.controller.conftest import Harness, training_job, wait_for


async def _exit_code(harness: Harness) -> dict[str, Any]:
    return training_job("j", replicas=1, run_seconds=0.2, exit_code=3, maxRestarts=0)


async def _oom(harness: Harness) -> dict[str, Any]:
    job = training_job("j", replicas=1, run_seconds=0.2, exit_code=137, maxRestarts=0)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    annotations["sim.gangq.dev/exit-reason"] = "OOMKilled"
    annotations["sim.gangq.dev/termination-message"] = "CUDA out of memory"
    return job


async def _timeout(harness: Harness) -> dict[str, Any]:
    harness.cluster.kubelets.ready_seconds = 3600
    return training_job("j", replicas=1, startupTimeoutSeconds=1, maxRestarts=0)


async def _max_runtime(harness: Harness) -> dict[str, Any]:
    return training_job(
        "j", replicas=1, run_seconds=None, startupTimeoutSeconds=1, maxRuntimeSeconds=1
    )


async def _runs_on(harness: Harness) -> dict[str, Any]:
    """A job that runs until its node goes (`_lose_the_node`)."""
    return training_job("j", replicas=1, run_seconds=None, maxRestarts=0)


async def _lose_the_node(harness: Harness, cause: str) -> None:
    """Once the job runs, its node stops reporting (kube-controller-manager marks it NotReady)
    or an administrator taints it NoExecute (`kubectl taint nodes NODE
    gpu-maintenance=true:NoExecute`) and the taint eviction controller deletes the pod."""
    await wait_for(lambda: harness.phase("j") == "Running")
    pod = await harness.kube.get(resources.PODS, "ml-train", "j-0")
    node = pod["spec"]["nodeName"]
    if cause == "NodeLost":
        harness.cluster.kubelets.fail_node(node)
        return
    taint = {"key": "gpu-maintenance", "value": "true", "effect": "NoExecute"}
    await harness.kube.patch(resources.NODES, "", node, {"spec": {"taints": [taint]}})


Setup = Callable[[Harness], Awaitable[dict[str, Any]]]
KINDS: list[tuple[str, Setup, str, str]] = [
    (
        "exit-code",
        _exit_code,
        "ReplicaFailed",
        r"replica 0 on gpu-[01] exited with code 3 \(Error\); 0 of 0 restarts used",
    ),
    (
        "oom-killed",
        _oom,
        "OOMKilled",
        r"replica 0 on gpu-[01] exited with code 137 \(OOMKilled\); 0 of 0 restarts used",
    ),
    (
        "startup-timeout",
        _timeout,
        "StartupTimeout",
        r"replica 0 on gpu-[01]: not Ready within startupTimeoutSeconds=1; 0 of 0 restarts used",
    ),
    ("max-runtime", _max_runtime, "MaxRuntimeExceeded", r"stopped: ran past maxRuntimeSeconds=1"),
    (
        "node-lost",
        _runs_on,
        "NodeLost",
        r"replica 0 on (gpu-[01]): node \1 is NotReady \(NodeStatusUnknown: Kubelet stopped "
        r"posting node status\.\); 0 of 0 restarts used",
    ),
    (
        "node-tainted",
        _runs_on,
        "NodeTainted",
        r"replica 0 on (gpu-[01]) was evicted: node \1 tainted gpu-maintenance=true:NoExecute; "
        r"0 of 0 restarts used",
    ),
]


async def _printed_reason(harness: Harness, name: str) -> str:
    """The Reason column of `kubectl get tj` (the server-side Table kubectl asks for)."""
    headers = {
        "Authorization": f"Bearer {harness.cluster.token}",
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",
    }
    url = harness.cluster.base_url + resources.TRAINING_JOBS.path("ml-train", name)
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as table:
        body = await table.json()
    columns = [c["name"] for c in body["columnDefinitions"]]
    return str(body["rows"][0]["cells"][columns.index("Reason")])


@pytest.mark.parametrize(
    ("setup", "cause", "pattern"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS]
)
async def test_each_failure_kind_says_why_everywhere_kubectl_looks(
    harness: Harness, setup: Setup, cause: str, pattern: str
) -> None:
    job = await setup(harness)
    harness.start()
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    if cause in ("NodeLost", "NodeTainted"):
        await _lose_the_node(harness, cause)
    await wait_for(lambda: harness.phase("j") == "Failed", within_s=30)
    shown = await harness.kube.get(resources.TRAINING_JOBS, "ml-train", "j")
    reason = shown["status"]["reason"]
    assert re.fullmatch(pattern, reason), reason
    failed = [c for c in shown["status"]["conditions"] if c["type"] == "Failed"]
    assert [(c["status"], c["reason"], c["message"]) for c in failed] == [("True", cause, reason)]
    assert shown["status"]["placement"], "where it ran stays readable after the end"
    events = [
        e
        for e in harness.objects(resources.EVENTS, "ml-train")
        if e["involvedObject"].get("name") == "j"
    ]
    assert ("Warning", cause, reason) in [(e["type"], e["reason"], e["message"]) for e in events]
    assert await _printed_reason(harness, "j") == reason
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, "ml-train/j")
    assert detail is not None
    recorded = [e.details.get("replicas") for e in detail.history if e.details.get("replicas")]
    assert recorded and recorded[-1][0]["replica"] == 0
    assert recorded[-1][0]["node"] == shown["status"]["placement"][0]["node"]
    assert recorded[-1][0]["reason"] == {"ReplicaFailed": "Error"}.get(cause, cause)
    if cause == "OOMKilled":
        assert recorded[-1][0]["exitCode"] == 137
        assert recorded[-1][0]["message"] == "CUDA out of memory"
        kept = await harness.kube.get(resources.PODS, "ml-train", "j-0")
        terminated = kept["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")


async def test_a_restarted_gang_keeps_the_names_and_records_each_failed_attempt(
    harness: Harness,
) -> None:
    harness.start()
    job = training_job("flaky", replicas=2, run_seconds=0.2, exit_code=2, maxRestarts=1)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("flaky") == "Failed", within_s=30)
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, "ml-train/flaky")
    assert detail is not None
    attempts = [e for e in detail.history if e.details.get("replicas")]
    assert [str(e.kind) for e in attempts] == ["requeued", "failed"]
    for attempt in attempts:
        for failure in attempt.details["replicas"]:
            assert failure["exitCode"] == 2 and failure["reason"] == "Error"
            assert failure["node"] in ("gpu-0", "gpu-1")
    pods = harness.objects(resources.PODS, "ml-train")
    assert sorted(p["metadata"]["name"] for p in pods) == ["flaky-0", "flaky-1"]
    admitted = {p["metadata"]["annotations"]["gangq.dev/admitted-at"] for p in pods}
    assert len(admitted) == 1, "only the last attempt's pods are kept"


async def test_a_finished_job_is_deleted_with_its_pods_after_its_ttl(harness: Harness) -> None:
    harness.start()
    job = training_job("brief", replicas=1, run_seconds=0.2, ttlSecondsAfterFinished=1)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("brief") == "Succeeded")
    pod = await harness.kube.get(resources.PODS, "ml-train", "brief-0")
    assert pod["status"]["phase"] == "Succeeded", "kept until the TTL passes"
    await wait_for(lambda: harness.job("brief") is None, within_s=15)
    await wait_for(lambda: not harness.objects(resources.PODS, "ml-train"), within_s=15)
