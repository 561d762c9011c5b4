"""`gangq logs NS/NAME`: a replica's log over HTTP from the emulator's kubelets, end to end.

The command runs in a thread with a kubeconfig for the emulator (served by this event loop),
as from an engineer's terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

from gangq.queue.cli import main
from gangq.queue.core import inventory
from gangq.queue.kube import objects, resources
from tests.controller.conftest import Harness, training_job, wait_for

LOG = "sim.gangq.dev/log"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exit_:
            return int(exit_.code or 0), out.getvalue(), err.getvalue()
    raise AssertionError("gangq did not exit")


async def gangq_logs(harness: Harness, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """The command in a thread of its own (its own event loop), as a terminal would run it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(harness.cluster.kubeconfig()))
    return await asyncio.to_thread(_cli, ["logs", *args, "--kubeconfig", str(kubeconfig)])


async def test_logs_of_a_replica_without_knowing_its_pod(harness: Harness, tmp_path: Path) -> None:
    harness.start()
    job = training_job("train", run_seconds=None)
    job["spec"]["template"]["metadata"]["annotations"][LOG] = "{pod}: step 1\n{pod}: step 2\ndone"
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")

    assert await gangq_logs(harness, tmp_path, "ml-train/train") == (
        0,
        "train-0: step 1\ntrain-0: step 2\ndone\n",
        "",
    )
    assert await gangq_logs(
        harness, tmp_path, "ml-train/train", "--replica", "1", "--tail", "2"
    ) == (
        0,
        "train-1: step 2\ndone\n",
        "",
    )
    code, _, err = await gangq_logs(harness, tmp_path, "ml-train/train", "--container", "nope")
    assert (code, err) == (2, "gangq: error: container nope is not valid for pod train-0 (400)\n")
    code, _, err = await gangq_logs(harness, tmp_path, "ml-train/train", "--previous-attempt")
    assert code == 2
    assert "no earlier attempt of replica 0 of ml-train/train is in the cluster" in err
    code, _, err = await gangq_logs(harness, tmp_path, "ml-train/train", "--replica", "5")
    assert (code, "no pod of replica 5 of ml-train/train" in err) == (2, True)
    code, _, err = await gangq_logs(harness, tmp_path, "ml-train/nope")
    assert (code, err) == (2, 'gangq: error: trainingjobs.gangq.dev "nope" not found (404)\n')
    code, _, err = await gangq_logs(harness, tmp_path, "train")
    assert (code, "give the job as NAMESPACE/NAME" in err) == (2, True)


async def test_previous_attempt_is_the_container_before_a_restart_in_place(
    harness: Harness, tmp_path: Path
) -> None:
    """A replica's pod restarted by its kubelet (restartPolicy OnFailure): `kubectl logs
    --previous` of that pod. The pod is written here as gangq writes it (names and labels),
    without a controller, so the kubelet restarts it undisturbed."""
    created = await harness.kube.request(
        "POST",
        resources.TRAINING_JOBS.path("ml-train"),
        body=training_job("flaky", run_seconds=None),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": objects.replica_name("flaky", 0),
            "labels": {
                inventory.JOB_NAME_LABEL: "flaky",
                objects.JOB_UID_LABEL: created["metadata"]["uid"],
                objects.REPLICA_LABEL: "0",
            },
            "annotations": {
                LOG: "attempt {restart}",
                "sim.gangq.dev/run-seconds": "0.3",
                "sim.gangq.dev/exit-code": "1",
            },
        },
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"requests": {"cpu": "1"}},
                }
            ],
        },
    }
    await harness.kube.create(resources.PODS, "ml-train", pod)

    def restarts() -> int:
        (found,) = harness.objects(resources.PODS, "ml-train")
        statuses = (found.get("status") or {}).get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount") or 0)

    await wait_for(lambda: restarts() >= 1)
    # The next run succeeds, so the pod ends and its runs hold still for the reads.
    await harness.kube.patch(
        resources.PODS,
        "ml-train",
        "flaky-0",
        {"metadata": {"annotations": {"sim.gangq.dev/exit-code": "0"}}},
    )
    await wait_for(
        lambda: harness.objects(resources.PODS, "ml-train")[0]["status"]["phase"] == "Succeeded"
    )
    count = restarts()
    assert await gangq_logs(harness, tmp_path, "ml-train/flaky") == (0, f"attempt {count}\n", "")
    assert await gangq_logs(harness, tmp_path, "ml-train/flaky", "--previous-attempt") == (
        0,
        f"attempt {count - 1}\n",
        "",
    )
