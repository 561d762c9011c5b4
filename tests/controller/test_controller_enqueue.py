"""New TrainingJobs seen in one pass are queued together; one refused job holds back no other."""

from __future__ import annotations

from typing import Any

from gangq.queue.kube import resources, trainingjob
from gangq.queue.store import database, jobs
from tests.controller.conftest import Harness, training_job, wait_for


def _admissible(harness: Harness, name: str) -> dict[str, Any]:
    for condition in ((harness.job(name) or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "Admissible":
            return dict(condition)
    return {}


async def test_a_burst_is_queued_at_once_and_a_name_conflict_stays_with_its_job(
    harness: Harness,
) -> None:
    sessions = database.session_factory(harness.engine)
    previous = training_job("dup", replicas=1)
    previous["metadata"]["uid"] = "previous-run-of-dup"
    async with sessions() as session, session.begin():
        await jobs.enqueue(
            session,
            [trainingjob.pending_job(previous, tenant="ml-train")],
            actor="test",
            now=0.0,
        )
        await jobs.suspend(session, "ml-train/dup", at=0.0, actor="test", reason="held")
    names = [f"burst-{index}" for index in range(12)]
    for name in [*names[:6], "dup", *names[6:]]:
        await harness.kube.create(
            resources.TRAINING_JOBS,
            "ml-train",
            training_job(name, replicas=1, devices=1, run_seconds=None),
        )
    harness.start()

    await wait_for(lambda: _admissible(harness, "dup").get("status") == "False")
    assert "waiting for the previous job ml-train/dup" in _admissible(harness, "dup")["message"]
    assert _admissible(harness, "dup")["reason"] == "NameInUse", "the spec itself is fine"
    await wait_for(lambda: all(harness.phase(name) == "Running" for name in names), within_s=30)
    async with sessions() as session:
        listed = await jobs.list_jobs(session)
    by_name = {str(record.key): record for record in listed.items}
    assert set(by_name) == {f"ml-train/{name}" for name in [*names, "dup"]}
    assert (by_name["ml-train/dup"].uid, by_name["ml-train/dup"].phase) == (
        "previous-run-of-dup",
        "Suspended",
    )


async def test_a_job_restored_with_its_end_shown_is_not_run_again(harness: Harness) -> None:
    """A TrainingJob whose status already shows it succeeded (restored from a backup, or kept
    while the store was replaced) is history: it is neither queued nor given pods."""
    restored = training_job("restored", replicas=1, devices=1)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", restored)
    ended = {"status": {"phase": "Succeeded", "reason": "all 1 replicas succeeded"}}
    await harness.kube.patch(
        resources.TRAINING_JOBS, "ml-train", "restored", ended, subresource="status"
    )
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("fresh", replicas=1, devices=1)
    )
    harness.start()
    await wait_for(lambda: harness.phase("fresh") == "Succeeded", within_s=30)
    async with database.session_factory(harness.engine)() as session:
        listed = await jobs.list_jobs(session)
    assert {str(record.key) for record in listed.items} == {"ml-train/fresh"}
    pods = harness.objects(resources.PODS, "ml-train")
    assert [p["metadata"]["name"] for p in pods] == ["fresh-0"]
    assert harness.phase("restored") == "Succeeded"
