"""Crash safety (issue 6 item 6) and high availability (item 7) against one emulator and one
PostgreSQL database: the controller is killed at every step of admission, release and teardown
in turn, and a second controller takes over from a dead leader."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from gangq.queue.kube import lifecycle, resources
from tests.controller.conftest import Harness, training_job, wait_for
from tests.controller.crashes import KillAfterWrite


def _partially_released(harness: Harness) -> list[str]:
    by_job: dict[str, set[bool]] = {}
    for pod in harness.objects(resources.PODS):
        job = pod["metadata"]["labels"].get("gangq.dev/job-name", "")
        by_job.setdefault(job, set()).add(lifecycle.is_gated(pod))
    return [job for job, states in by_job.items() if len(states) > 1]


async def _state(harness: Harness) -> str:
    """What a run that did not converge left: the objects' states and the store's rows."""
    lines = []
    for kind in (resources.TRAINING_JOBS, resources.PODS, resources.RESOURCE_CLAIMS):
        for obj in harness.objects(kind, "ml-train"):
            shown = obj.get("status") or {}
            gates = (obj.get("spec") or {}).get("schedulingGates")
            allocated = "allocation" in shown
            lines.append(
                f"{kind.plural}/{obj['metadata']['name']}: phase={shown.get('phase')} "
                + (
                    f"allocated={allocated}"
                    if kind is resources.RESOURCE_CLAIMS
                    else f"gates={gates}"
                )
            )
    async with harness.engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT name, phase, evicting, started_at, pending_message FROM jobs")
        )
        lines.extend(f"store: {tuple(row)}" for row in rows)
    return "\n".join(lines)


async def _crash_at(harness: Harness, index: int, *, name: str) -> bool:
    """Run a gang with the controller killed right after the `index`-th cluster write of the
    job's lifecycle; restart it and check the invariants. False when the run had fewer writes."""
    holder = f"crash-{index}"
    killer = KillAfterWrite(harness, index, holder, namespace="ml-train")
    fired, doubles = killer.fired, killer.doubles
    listeners = harness.cluster.registry.storage.listeners
    listeners.append(killer)
    try:
        harness.start(holder)
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job(name, run_seconds=0.2)
        )
        await wait_for(lambda: fired.is_set() or harness.phase(name) == "Succeeded")
        if fired.is_set():
            await harness.kill(holder)
            harness.start(f"{holder}-again")
        try:
            await wait_for(lambda: harness.phase(name) == "Succeeded")
        except AssertionError as error:
            raise AssertionError(f"crash at write {index}: {await _state(harness)}") from error
        await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
        # The last attempt's pods stay for their logs, all of them terminated (rule 11).
        kept = harness.objects(resources.PODS, "ml-train")
        assert kept and all(lifecycle.phase(pod) == "Succeeded" for pod in kept)
        assert not _partially_released(harness)
        assert not doubles, f"devices allocated twice after a crash at write {index}: {doubles}"
        await harness.stop(f"{holder}-again" if fired.is_set() else holder)
        return fired.is_set()
    finally:
        listeners.remove(killer)


async def test_a_crash_at_any_write_converges_without_leaks_or_half_released_gangs(
    harness: Harness,
) -> None:
    index = 1
    while await _crash_at(harness, index, name=f"job-{index}"):
        index += 1
    assert index > 8, "the lifecycle should take more than eight writes"
    async with harness.engine.connect() as connection:
        active = (
            await connection.execute(
                text("SELECT count(*) FROM reservations WHERE released_at IS NULL")
            )
        ).scalar()
        phases = (await connection.execute(text("SELECT DISTINCT phase FROM jobs"))).scalars().all()
    assert active == 0
    assert set(phases) == {"Succeeded"}


async def test_a_follower_takes_over_within_fifteen_seconds_and_only_the_leader_acts(
    harness: Harness,
) -> None:
    harness.start("first", actor="ctl-first")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("one", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("one") == "Running")
    harness.start("second", actor="ctl-second", leader_retry_s=2.0)
    await wait_for(harness.runs["second"][2].synced.is_set)
    async with harness.engine.connect() as connection:
        actors = set(
            (
                await connection.execute(
                    text("SELECT DISTINCT actor FROM events WHERE job_id IS NOT NULL")
                )
            ).scalars()
        )
    assert actors == {"ctl-first"}
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    await harness.kill("first")
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "one")
    await wait_for(lambda: harness.job("one") is None, within_s=15)
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("two", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("two") == "Running", within_s=15)
    assert loop.time() - killed_at < 15
    async with harness.engine.connect() as connection:
        holder = (await connection.execute(text("SELECT holder FROM leadership"))).scalar()
        rows: Any = (
            await connection.execute(
                text("SELECT job_key, actor FROM events WHERE kind = 'admitted'")
            )
        ).all()
    assert holder == "second"
    assert {(key, actor) for key, actor in rows} == {
        ("ml-train/one", "ctl-first"),
        ("ml-train/two", "ctl-second"),
    }


async def _preempt_with_crash_at(harness: Harness, index: int, *, tiers: object) -> bool:
    """Training runs; a prod-inference job arrives and preempts it, and the controller is killed
    right after the `index`-th write of that preemption. False when there were fewer writes."""
    train, serve = f"train-{index}", f"serve-{index}"
    harness.start("setup", tiers=tiers)
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job(train, run_seconds=None)
    )
    await wait_for(lambda: harness.phase(train) == "Running")
    await harness.stop("setup")
    killer = KillAfterWrite(harness, index, "victim")
    fired, doubles = killer.fired, killer.doubles
    listeners = harness.cluster.registry.storage.listeners
    listeners.append(killer)
    try:
        job = training_job(serve, namespace="inference", tier="prod-inference", replicas=1)
        job["spec"]["template"]["metadata"]["annotations"].clear()
        harness.start("victim", tiers=tiers)
        await harness.kube.create(resources.TRAINING_JOBS, "inference", job)
        await wait_for(lambda: fired.is_set() or harness.phase(serve, "inference") == "Running")
        if fired.is_set():
            await harness.kill("victim")
            harness.start("victim", tiers=tiers)
        await wait_for(lambda: harness.phase(serve, "inference") == "Running")
        await wait_for(lambda: harness.phase(train) == "Queued")
        assert not any(
            p["metadata"]["name"].startswith(train) for p in harness.objects(resources.PODS)
        )
        assert not _partially_released(harness)
        assert not doubles, f"devices allocated twice after a crash at write {index}: {doubles}"
    finally:
        listeners.remove(killer)
    for namespace, name in (("inference", serve), ("ml-train", train)):
        await harness.kube.delete(resources.TRAINING_JOBS, namespace, name)
    await wait_for(lambda: not harness.objects(resources.TRAINING_JOBS))
    await harness.stop("victim")
    return fired.is_set()


async def test_a_crash_during_preemption_converges(harness: Harness) -> None:
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    index = 1
    while await _preempt_with_crash_at(harness, index, tiers=tiers):
        index += 2
    assert index > 10, "a preemption should take more than ten writes"
