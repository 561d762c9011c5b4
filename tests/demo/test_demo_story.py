"""The story checks over a ledger fed with the events of a reference-like run."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import report, story
from tests.demo.objects import LONG_RUNNING, STORY, claim, pod, resource_slice, training_job

TIERS = {"inference": "prod-inference", "ml-train": "training", "ci": "small"}


class Run:
    """Feeds a ledger the watch events of jobs that are admitted, released, run and end."""

    def __init__(self) -> None:
        self.ledger = ledger_module.Ledger({"gpu.nvidia.com": "uuid"})
        self.replicas: dict[str, int] = {}
        self.device = 0
        uuids = {f"gpu-{i}": f"GPU-{i}" for i in range(64)}
        self.event(ledger_module.SLICES, resource_slice("gpu-0", uuids))

    def event(
        self, kind: str, obj: dict[str, Any], *, at: float = 0.0, deleted: bool = False
    ) -> None:
        self.ledger.on_event(kind, "DELETED" if deleted else "MODIFIED", obj, at=at)

    def job(self, key: str, at: float, phase: str = "", **fields: Any) -> None:
        namespace, name = key.split("/")
        replicas = fields.pop("replicas", self.replicas.get(key, 1))
        self.replicas[key] = replicas
        body = training_job(
            name,
            namespace=namespace,
            tier=TIERS[namespace],
            replicas=replicas,
            phase=phase,
            **fields,
        )
        self.event(ledger_module.TRAINING_JOBS, body, at=at)

    def pods(self, key: str, replicas: range, at: float, **fields: Any) -> None:
        namespace, name = key.split("/")
        for replica in replicas:
            claim_name = f"{name}-{replica}"
            body = pod(name, replica, namespace=namespace, claims=(claim_name,), **fields)
            self.event(ledger_module.PODS, body, at=at, deleted=fields.get("phase") == "gone")

    def start(self, key: str, at: float, replicas: range | None = None) -> None:
        """Admit with allocated claims, gated pods, one release, then Running."""
        namespace, name = key.split("/")
        replicas = replicas or range(self.replicas[key])
        self.job(key, at, "Admitted")
        for replica in replicas:
            devices = [f"gpu-{(self.device + i) % 64}" for i in range(2)]
            self.device += 2
            self.event(
                ledger_module.CLAIMS,
                claim(f"{name}-{replica}", *devices, namespace=namespace),
                at=at,
            )
        self.pods(key, replicas, at)
        self.pods(key, replicas, at + 0.01, gated=False)
        self.pods(key, replicas, at + 0.5, gated=False, phase="Running")
        self.job(key, at + 0.5, "Running")

    def end(self, key: str, at: float, *, phase: str = "Succeeded") -> None:
        namespace, name = key.split("/")
        replicas = range(self.replicas[key])
        self.pods(key, replicas, at, gated=False, phase=phase)
        for replica in replicas:
            self.event(ledger_module.CLAIMS, claim(f"{name}-{replica}", namespace=namespace), at=at)
        self.job(key, at + 0.1, phase)

    def preempt(self, key: str, at: float) -> None:
        namespace, name = key.split("/")
        self.pods(key, range(1), at, gated=False, phase="Running", deleting=True)
        self.pods(key, range(1), at + 0.1, gated=False, phase="gone")
        self.event(ledger_module.CLAIMS, claim(f"{name}-0", namespace=namespace), at=at + 0.2)
        self.job(key, at + 0.2, "Queued", preemptions=1, reason="preemption: evicted")


def reference_run(*, victim: str = "ci/small-1", waiting_admitted_at: float = 7.0) -> Run:
    run = Run()
    run.job("inference/llm", 1.0, replicas=2)
    run.start("inference/llm", 1.0)
    run.job("ml-train/big", 2.0, replicas=4)
    run.start("ml-train/big", 2.0)
    run.job("ml-train/big-2", 3.0, "Queued", replicas=4, reason="capacity: needs 4 nodes")
    for small in ("ci/small-0", "ci/small-1"):
        run.job(small, 4.0, replicas=1)
        run.start(small, 4.0)
    run.job("inference/llm", 5.0, "Running", replicas=3)
    run.preempt(victim, 5.0)
    run.start("inference/llm", 5.5, range(2, 3))
    run.end("ml-train/big", 6.0)
    if victim.startswith("ml-train"):
        run.start(victim, 6.5)
        run.end(victim, 6.8)
    run.start("ml-train/big-2", waiting_admitted_at)
    run.end("ml-train/big-2", 9.0)
    run.end("ci/small-0", 9.5)
    if victim.startswith("ci"):
        run.start(victim, 10.0)
        run.end(victim, 10.5)
    run.ledger.finish(at=11.0)
    return run


def checks(run: Run) -> dict[str, story.Check]:
    found = story.invariants(run.ledger) + story.expectations(
        run.ledger, STORY, long_running=LONG_RUNNING
    )
    return {check.name: check for check in found}


def test_the_reference_story_passes_every_check() -> None:
    run = reference_run()
    found = checks(run)
    assert {name: check.ok for name, check in found.items()} == dict.fromkeys(found, True)
    assert found["the scale-up preempted only small jobs"].detail == "preempted: ci/small-1 (small)"
    assert story.outstanding(run.ledger, STORY, expected_jobs=5, long_running=LONG_RUNNING) == []
    assert story.outstanding(run.ledger, STORY, expected_jobs=6, long_running=LONG_RUNNING) == [
        "1 job(s) not seen yet"
    ]


def test_preempting_a_training_gang_fails_the_story() -> None:
    found = checks(reference_run(victim="ml-train/big"))
    check = found["the scale-up preempted only small jobs"]
    assert not check.ok
    assert check.detail == "preempted: ml-train/big (training)"


def test_admitting_the_waiting_gang_before_the_blocker_stopped_fails_the_story() -> None:
    found = checks(reference_run(waiting_admitted_at=5.8))
    assert not found["ml-train/big-2 waited whole for ml-train/big"].ok


@pytest.mark.parametrize("partial", [False, True], ids=["whole", "partial"])
def test_the_json_object_carries_the_invariant_counts(partial: bool) -> None:
    run = reference_run()
    if partial:
        run.job("ml-train/late", 12.0, replicas=2)
        run.pods("ml-train/late", range(2), 12.0)
        run.pods("ml-train/late", range(1), 12.1, gated=False)
        run.ledger.finish(at=20.0)
    outcome = report.Outcome(run.ledger, tuple(checks(run).values()), 21.0, timed_out=False)
    body = report.as_json(outcome)
    assert body["partial_starts"] == (1 if partial else 0)
    assert body["double_allocations"] == 0
    assert body["unique_device_ids"] is True
    assert body["ok"] is not partial
    assert {job["name"] for job in body["jobs"]} >= {"llm", "big", "big-2", "small-0", "small-1"}
    waiting = next(job for job in body["jobs"] if job["name"] == "big-2")
    assert (waiting["admitted_at"], waiting["finished_at"], waiting["preemptions"]) == (7.0, 9.1, 0)
    assert ("PASS  no partial start" in report.summary(outcome)) is not partial


def test_runs_of_one_event_in_one_namespace_read_as_one_line() -> None:
    entries = [(1.0, "step 4: small jobs (small-jobs.yaml)")]
    entries += [(1.1, f"ci/ci-test-0{i} Admitted") for i in range(4)]
    entries += [(1.2, "ml-train/big Running"), (1.3, "ci/a Queued: quota"), (1.3, "ci/b Running")]
    entries += [(1.3, "ci/c Queued: quota"), (1.4, "step 5: scale")]
    assert report.condense(entries) == [
        (1.0, "step 4: small jobs (small-jobs.yaml)"),
        (1.1, "ci/ci-test-00 ... ci-test-03 Admitted (4 jobs)"),
        (1.2, "ml-train/big Running"),
        (1.3, "ci/a, ci/c Queued: quota"),
        (1.3, "ci/b Running"),
        (1.4, "step 5: scale"),
    ]


@pytest.mark.parametrize(
    ("nodes", "ok", "detail"),
    [
        (("gpu-4", "gpu-5"), True, "ml-train/big: rack-1"),
        (("gpu-3", "gpu-4"), False, "ml-train/big: rack-0, rack-1"),
        ((), False, "ml-train/big: never placed"),
    ],
    ids=["one-rack", "two-racks", "never-placed"],
)
def test_gangs_asked_to_stay_in_one_domain(nodes: tuple[str, ...], ok: bool, detail: str) -> None:
    observed = ledger_module.Ledger({}, domains={f"gpu-{i}": f"rack-{i // 4}" for i in range(8)})
    body = training_job("big", replicas=2, phase="Running", nodes=nodes)
    observed.on_event(ledger_module.TRAINING_JOBS, "ADDED", body, at=1.0)
    roles = STORY.model_copy(update={"one_domain": ("ml-train/big",)})
    found = {c.name: c for c in story.expectations(observed, roles, long_running=LONG_RUNNING)}
    check = found["gangs kept in one topology domain"]
    assert (check.ok, check.detail) == (ok, detail)
