"""What the controller writes to TrainingJob status, and how often."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gangq.queue.core import explain, model
from gangq.queue.kube import reconciler, resources, status
from gangq.queue.store import database, jobs, leader, tenants
from tests.controller.conftest import Harness, training_job, wait_for


def _status(harness: Harness, name: str) -> dict[str, object]:
    return dict((harness.job(name) or {}).get("status") or {})


async def _stored_position(harness: Harness, key: str) -> int | None:
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, key)
    return None if detail is None else detail.job.position


async def _queue_behind_a_blocker(harness: Harness, names: list[str]) -> None:
    """A running gang takes the whole cluster; `names` queue behind it in this order."""
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("blocker", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("blocker") == "Running")
    for name in names:
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job(name, run_seconds=None)
        )
        await wait_for(lambda n=name: _status(harness, n).get("queuePosition") is not None)
        await asyncio.sleep(1.1)  # creation timestamps have whole seconds: no tie in the order


async def test_a_queue_move_is_shown_at_a_bounded_rate_and_a_phase_change_at_once(
    harness: Harness,
) -> None:
    harness.start(status_refresh_s=3600.0)
    await _queue_behind_a_blocker(harness, ["head", "waiting"])
    assert _status(harness, "waiting")["queuePosition"] == 2

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "head")
    deadline = asyncio.get_running_loop().time() + 15
    while await _stored_position(harness, "ml-train/waiting") != 1:
        assert asyncio.get_running_loop().time() < deadline, "the queue never moved"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # two cycle intervals: steps ran after the move
    assert _status(harness, "waiting")["queuePosition"] == 2

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "blocker")
    await wait_for(lambda: harness.phase("waiting") in ("Admitted", "Running"))
    assert _status(harness, "waiting").get("queuePosition") is None


async def test_a_bounded_number_of_queue_moves_per_step_still_reaches_every_job(
    harness: Harness,
) -> None:
    """One move shown per step, the stalest first: every waiting job is shown its new place."""
    harness.start(status_refresh_s=0.0, status_moves_per_step=1)
    names = ["head", "second", "third", "fourth"]
    await _queue_behind_a_blocker(harness, names)
    assert [_status(harness, n)["queuePosition"] for n in names] == [1, 2, 3, 4]
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "head")
    await wait_for(
        lambda: [_status(harness, n).get("queuePosition") for n in names[1:]] == [1, 2, 3]
    )


async def _stored_reason(harness: Harness, key: str) -> explain.ReasonCode | None:
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, key)
    reason = None if detail is None else detail.job.reason
    return None if reason is None else reason.code


async def _borrow(harness: Harness, limit: int) -> None:
    """Set ml-train's borrowing limit as a quota admin would (its NOTIFY wakes the leader)."""
    quota = model.TenantQuota(
        tenant=model.Tenant("ml-train"),
        device_class="gpu.nvidia.com",
        nominal=16,
        borrowing_limit=limit,
        allowed_tiers=("training", "small"),
    )
    async with database.session_factory(harness.engine)() as session, session.begin():
        await tenants.upsert_tenant(session, "ml-train", [quota], actor="test", now=0.0)


def _wait_events(harness: Harness, name: str) -> list[str]:
    return [
        str(e.get("reason"))
        for e in harness.objects(resources.EVENTS, "ml-train")
        if (e.get("involvedObject") or {}).get("name") == name
    ]


async def test_a_wait_that_swings_back_to_a_kind_it_showed_is_churn_not_news(
    harness: Harness,
) -> None:
    """A queued job is told each kind of its wait once: an Event with its first status write.
    Swinging back to a kind it was already shown (in a full cluster, capacity and a backfill
    reservation ahead alternate with every ending) is held back like a queue move."""
    harness.start(status_refresh_s=3600.0, status_reason_interval_s=0.0)
    await _queue_behind_a_blocker(harness, ["waiting"])
    await wait_for(lambda: status.wait_kind(_status(harness, "waiting")) == "Capacity")

    await _borrow(harness, 0)  # the blocker uses all 16 nominal devices: waiting needs a loan
    await wait_for(lambda: status.wait_kind(_status(harness, "waiting")) == "Quota")
    # The Event follows its status write.
    await wait_for(lambda: sorted(_wait_events(harness, "waiting")) == ["Capacity", "Quota"])

    await _borrow(harness, 16)
    deadline = asyncio.get_running_loop().time() + 15
    while await _stored_reason(harness, "ml-train/waiting") != explain.ReasonCode.CAPACITY:
        assert asyncio.get_running_loop().time() < deadline, "the wait never swung back"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # two cycle intervals: steps ran after the swing
    assert status.wait_kind(_status(harness, "waiting")) == "Quota"
    assert sorted(_wait_events(harness, "waiting")) == ["Capacity", "Quota"]

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "blocker")
    await wait_for(lambda: harness.phase("waiting") in ("Admitted", "Running"))


async def test_a_job_whose_status_inputs_stay_the_same_is_not_judged_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle steps over a long queue cost no status computation per waiting job: a job whose
    record, object version, placement and skew are what its shown status was judged from is
    skipped; a change to any of them has it judged again."""
    judged: list[list[str]] = []
    desired = status.desired
    step = reconciler.Reconciler.step

    def counted_desired(record: Any, **kwargs: Any) -> dict[str, Any]:
        if judged and record is not None:
            judged[-1].append(record.key)
        return desired(record, **kwargs)

    async def counted_step(self: reconciler.Reconciler, *, term: leader.Term) -> None:
        judged.append([])
        await step(self, term=term)

    monkeypatch.setattr(status, "desired", counted_desired)
    monkeypatch.setattr(reconciler.Reconciler, "step", counted_step)
    harness.start()
    await _queue_behind_a_blocker(harness, ["waiting"])
    settled = len(judged) + 2
    await wait_for(lambda: len(judged) >= settled + 3)  # idle steps on the timer
    assert judged[settled:] and not any(judged[settled:]), judged

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "blocker")
    await wait_for(lambda: harness.phase("waiting") == "Running")
    assert any("ml-train/waiting" in keys for keys in judged[settled:])
