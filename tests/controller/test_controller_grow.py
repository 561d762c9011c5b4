"""Growing a running elastic gang against the emulator and PostgreSQL (PRODUCT rule 13): when a
gang beside it ends, the cycle grows a gang that started at its minimum, and the controller
builds the added replicas like an admission builds a gang, releases them together and tells
every pod the new size; it undoes a grow whose replicas do not come up; a crash at any write
of a grow converges.

The undo and the crashes are driven by a grow stored through the function the cycle stores
the core's with (`grows.write`), for a gang the cycle would not grow itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.core import model
from gangq.queue.kube import growing, lifecycle, objects, resources
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.storage import Event
from gangq.queue.store import database, grows, reservations, snapshot
from tests.controller import api_refusals, bad_input
from tests.controller.conftest import Harness, running_harness, training_job, wait_for
from tests.controller.crashes import KillAfterWrite

FOUR_NODES = Inventory(nodes=4, gpus_per_node=8, racks=2)
JOBS = "gangq.dev/trainingjobs"


@pytest.fixture
async def wide(engine: AsyncEngine) -> AsyncIterator[Harness]:
    async with running_harness(engine, inventory=FOUR_NODES) as built:
        yield built


def _pods(harness: Harness, job: str) -> dict[int, dict[str, Any]]:
    return {
        int(p["metadata"]["labels"][objects.REPLICA_LABEL]): p
        for p in harness.objects(resources.PODS, "ml-train")
        if p["metadata"]["labels"].get(objects.JOB_NAME_LABEL) == job
    }


def _claims(harness: Harness, job: str) -> dict[int, dict[str, Any]]:
    return {
        int(c["metadata"]["labels"][objects.REPLICA_LABEL]): c
        for c in harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
        if c["metadata"]["labels"].get(objects.JOB_NAME_LABEL) == job
    }


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


NOT_GROWN_BY_THE_CYCLE = {"maxRuntimeSeconds": 3600, "restartSeconds": 3600}
"""A gang whose re-forming costs more than a grow would save (`elastic.grow_pays`): the cycle
never grows it, so the grow a test stores is the only one, and a gang a test shrinks by hand
(with no preemptor to take the devices) is not grown back."""


async def _running_at_two(harness: Harness, job: str, **spec: Any) -> str:
    """`job` (4 x 8 at most, 2 at least) starts at 2 beside a gang of 2 without end, whose
    name is returned."""
    blocker = f"{job}-blocker"
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job(blocker, run_seconds=None)
    )
    await wait_for(lambda: harness.phase(blocker) == "Running")
    body = training_job(job, replicas=4, run_seconds=None, elastic={"minReplicas": 2}, **spec)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase(job) == "Running")
    assert sorted(_pods(harness, job)) == [0, 1]
    return blocker


async def _delete(harness: Harness, blocker: str) -> None:
    """The gang beside goes: two nodes come free."""
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", blocker)
    await wait_for(lambda: not _claims(harness, blocker))
    await wait_for(lambda: harness.job(blocker) is None)


async def _free_nodes(harness: Harness) -> list[str]:
    """Nodes none of whose devices the store holds, once the store has released the
    deleted gang's."""
    inventory = FOUR_NODES

    async def free() -> list[str]:
        async with database.session_factory(harness.engine)() as session:
            held = await reservations.reserved_devices(session)
        return sorted(
            {inventory.node_name(i) for i in range(inventory.nodes)}
            - {device.split("/")[1] for device in held}
        )

    for _ in range(500):
        found = await free()
        if len(found) >= 2:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError("the deleted gang's devices were not released")


async def _grow(harness: Harness, job: str, *, leader: str) -> list[str]:
    """Store a grow of `job` from 2 to 4 replicas on two free nodes, as the cycle stores the
    core's, with the controller `leader` stopped: the cycle stores its grows before the
    step reads the gangs back, never in the middle of that read. Returns the nodes of
    replicas 2 and 3."""
    nodes = (await _free_nodes(harness))[:2]
    pool = {n: sorted(d for d in _published(harness) if d.split("/")[1] == n) for n in nodes}
    grow = model.Grow(
        model.JobKey(f"ml-train/{job}"),
        tuple(
            model.ReplicaPlacement(replica, model.NodeName(n), tuple(pool[n]))
            for replica, n in zip((2, 3), nodes, strict=True)
        ),
        borrowed=16,
    )
    inventory = harness.runs[leader][2].inventory()
    assert inventory is not None
    await harness.stop(leader)
    async with database.session_factory(harness.engine)() as session, session.begin():
        rows = snapshot.Views().rows
        await rows.read(session)
        holding = {snapshot.key_of(r): r for r in rows.holding()}
        stored = await grows.write(
            session,
            [grow],
            holding=holding,
            inventory=inventory,
            now=time.time(),
            actor="test",
        )
    assert stored == (grow.job,)
    return nodes


def _published(harness: Harness) -> list[str]:
    """Every published device id, `driver/pool/device`."""
    found = []
    for slice_obj in harness.objects(resources.RESOURCE_SLICES):
        spec = slice_obj["spec"]
        for device in spec.get("devices") or []:
            found.append(f"{spec['driver']}/{spec['pool']['name']}/{device['name']}")
    return found


async def _row(harness: Harness, job: str) -> tuple[Any, ...]:
    async with harness.engine.connect() as connection:
        found = (
            await connection.execute(
                text("SELECT phase, size, grown_from, borrowed FROM jobs WHERE name = :name"),
                {"name": job},
            )
        ).one()
    return tuple(found)


async def _active_replicas(harness: Harness, job: str) -> list[int]:
    async with harness.engine.connect() as connection:
        found = await connection.execute(
            text(
                "SELECT DISTINCT r.replica FROM reservations r JOIN jobs j ON j.id = r.job_id "
                "WHERE j.name = :name AND r.released_at IS NULL ORDER BY r.replica"
            ),
            {"name": job},
        )
        return list(found.scalars())


def _size(harness: Harness, job: str) -> object:
    return bad_input.status_of(harness, job, "ml-train").get("size")


async def _state(harness: Harness, job: str) -> str:
    """What a run that did not converge left: the job's status, its objects and history."""
    lines = [f"status: {bad_input.status_of(harness, job, 'ml-train')}"]
    for replica, pod in sorted(_pods(harness, job).items()):
        gated = lifecycle.is_gated(pod)
        lines.append(f"pod {replica}: {lifecycle.phase(pod)} gated={gated}")
    for replica, claim in sorted(_claims(harness, job).items()):
        lines.append(f"claim {replica}: {objects.allocated_devices(claim)}")
    async with harness.engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT kind, reason FROM events WHERE job_key = :key ORDER BY id"),
            {"key": f"ml-train/{job}"},
        )
        lines.extend(f"event {kind}: {reason}" for kind, reason in rows)
    return "\n".join(lines)


async def _until_released(harness: Harness, job: str) -> None:
    """Wait until the store holds no device for `job` (its end is committed)."""
    for _ in range(500):
        if not await _active_replicas(harness, job):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{job} still holds devices: {await _state(harness, job)}")


def _watch_sizes(harness: Harness, job: str) -> list[object]:
    """Every `status.size` the TrainingJob `job` shows from now on."""
    shown: list[object] = []

    def on_job(event: Event) -> None:
        if event.resource == JOBS and event.object["metadata"]["name"] == job:
            shown.append((event.object.get("status") or {}).get("size"))

    harness.cluster.registry.storage.listeners.append(on_job)
    return shown


def _watch_added_releases(harness: Harness, job: str) -> list[list[str]]:
    """Every moment an added pod of `job` (replica 2 or 3) ran ungated while the other was
    missing: the added replicas are released together."""
    partial: list[list[str]] = []

    def on_pod(event: Event) -> None:
        if event.resource != kinds.PODS.key:
            return
        added = {r: p for r, p in _pods(harness, job).items() if r >= 2}
        if len(added) < 2 and any(not p["spec"].get("schedulingGates") for p in added.values()):
            partial.append(sorted(p["metadata"]["name"] for p in added.values()))

    harness.cluster.registry.storage.listeners.append(on_pod)
    return partial


def _resizes(harness: Harness, leader: str) -> dict[str, float]:
    """`gangq_elastic_resizes_total` of the training tier by outcome, as the leader counted."""
    registry = harness.metrics[leader].registry
    found = {
        outcome: registry.get_sample_value(
            "gangq_elastic_resizes_total", {"tier": "training", "outcome": outcome}
        )
        for outcome in ("grown", "grow_undone", "shrunk")
    }
    return {outcome: value for outcome, value in found.items() if value}


async def test_a_gang_at_its_minimum_grows_to_its_maximum_when_the_gang_beside_it_ends(
    wide: Harness, database_url: str, tmp_path: Path
) -> None:
    harness = wide
    harness.start()
    # Without an end, it grows only with checkpoints: re-forming then loses little. It grows
    # once the freed devices have idled what re-forming destroys: 16 devices x 1 s since its
    # checkpoint, no restart.
    blocker = await _running_at_two(
        harness, "elastic", checkpointIntervalSeconds=1, restartSeconds=0
    )
    first = {r: p["metadata"]["uid"] for r, p in _pods(harness, "elastic").items()}
    nodes = sorted(
        p["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        for p in _pods(harness, blocker).values()
    )
    *_, borrowed = await _row(harness, "elastic")
    partial = _watch_added_releases(harness, "elastic")
    sizes = _watch_sizes(harness, "elastic")
    await _delete(harness, blocker)
    await wait_for(lambda: _size(harness, "elastic") == "4/4")

    pods = _pods(harness, "elastic")
    assert sorted(pods) == [0, 1, 2, 3]
    assert {r: pods[r]["metadata"]["uid"] for r in (0, 1)} == first, "the old replicas ran on"
    assert not partial, f"an added pod was released before the other existed: {partial}"
    assert all(not p["spec"].get("schedulingGates") for p in pods.values())
    # every pod is told the new size once the grow is done
    await wait_for(
        lambda: all(
            p["metadata"]["annotations"][objects.SIZE] == "4"
            for p in _pods(harness, "elastic").values()
        )
    )
    added_on = sorted(pods[r]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for r in (2, 3))
    assert added_on == nodes, "the added replicas run where the ended gang ran"
    assert sizes[-1] == "4/4" and set(sizes) == {"2/4", "4/4"}
    for replica in (2, 3):
        env = _env(pods[replica])
        assert (env["GANGQ_REPLICAS"], env["WORLD_SIZE"]) == ("4", "4")
        assert (env["GANGQ_REPLICA_INDEX"], env["MASTER_ADDR"]) == (
            str(replica),
            "elastic-0.elastic",
        )
    assert sorted(_claims(harness, "elastic")) == [0, 1, 2, 3]
    phase, size, grown_from, now_borrowed = await _row(harness, "elastic")
    assert (phase, size, grown_from) == ("Running", 4, None)
    assert now_borrowed >= borrowed
    assert await _active_replicas(harness, "elastic") == [0, 1, 2, 3]
    assert bad_input.kube_events(harness, "elastic", "ml-train", "Grown")
    assert _resizes(harness, "a") == {"grown": 1.0}

    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", "elastic")
        history = (await api.get("/v1/jobs/ml-train/elastic")).json()["history"]
    assert out["size"] == 4 and out.get("growingTo") is None
    assert [p["replica"] for p in out["placement"]] == [0, 1, 2, 3]
    reasons = [event["reason"] for event in history]
    assert any(r.startswith("growing from 2 to 4 replicas") for r in reasons), reasons
    assert "grew from 2 to 4 replicas, all pods running" in reasons


async def test_a_grow_whose_replicas_never_become_ready_is_undone(wide: Harness) -> None:
    """The two free nodes are cordoned by a taint the pods do not tolerate: the added pods
    are released but never scheduled, and past startupTimeoutSeconds the grow is undone."""
    harness = wide
    harness.start()
    blocker = await _running_at_two(
        harness, "elastic", startupTimeoutSeconds=3, **NOT_GROWN_BY_THE_CYCLE
    )
    await _delete(harness, blocker)
    first = {r: p["metadata"]["uid"] for r, p in _pods(harness, "elastic").items()}
    before = await _row(harness, "elastic")
    for node in await _free_nodes(harness):
        taint = {"key": "maintenance", "effect": "NoSchedule"}
        await harness.kube.patch(resources.NODES, "", node, {"spec": {"taints": [taint]}})
    sizes = _watch_sizes(harness, "elastic")
    await _grow(harness, "elastic", leader="a")
    harness.start("b")
    await wait_for(lambda: sorted(_pods(harness, "elastic")) == [0, 1, 2, 3])
    await wait_for(
        lambda: (
            bad_input.status_of(harness, "elastic", "ml-train").get("reason")
            == "growing from 2 to 4 replicas"
        )
    )
    assert bad_input.status_of(harness, "elastic", "ml-train")["size"] == "2/4"
    await wait_for(lambda: bad_input.kube_events(harness, "elastic", "ml-train", "GrowFailed"))

    assert {r: p["metadata"]["uid"] for r, p in _pods(harness, "elastic").items()} == first
    assert sorted(_claims(harness, "elastic")) == [0, 1]
    assert await _row(harness, "elastic") == before, "size and borrowed devices as before"
    assert await _active_replicas(harness, "elastic") == [0, 1]
    (event,) = bad_input.kube_events(harness, "elastic", "ml-train", "GrowFailed")
    assert event["message"].startswith("grow to 4 failed: replica 2 on ")
    assert "not Ready within startupTimeoutSeconds=3" in event["message"]
    assert harness.phase("elastic") == "Running"
    await wait_for(lambda: _size(harness, "elastic") == "2/4")
    assert "4/4" not in sizes, f"an undone grow showed as done: {sizes}"
    assert _resizes(harness, "b") == {"grow_undone": 1.0}


async def test_a_grow_whose_pods_the_api_server_refuses_is_undone_without_blame(
    wide: Harness,
) -> None:
    """Creating pods is forbidden to the controller: the added replicas cannot be built, the
    grow is undone at once, and the job runs on at 2 with neither a restart nor a failure
    (rule 14: a refused write of gangq's own is not the job's doing)."""
    harness = wide
    harness.start()
    blocker = await _running_at_two(harness, "elastic", **NOT_GROWN_BY_THE_CYCLE)
    await _delete(harness, blocker)
    before = await _row(harness, "elastic")
    refusal = api_refusals.forbidden("create", "pods", "ml-train")
    harness.cluster.faults.refuse_next(1_000_000, refusal, verb="create", resource="pods")
    await _grow(harness, "elastic", leader="a")
    harness.start("b")
    await wait_for(lambda: bad_input.kube_events(harness, "elastic", "ml-train", "GrowFailed"))

    (event,) = bad_input.kube_events(harness, "elastic", "ml-train", "GrowFailed")
    assert event["message"].startswith("grow to 4 failed: the API server refused ")
    assert sorted(_pods(harness, "elastic")) == [0, 1]
    assert sorted(_claims(harness, "elastic")) == [0, 1]
    assert await _row(harness, "elastic") == before
    assert await _active_replicas(harness, "elastic") == [0, 1]
    shown = bad_input.status_of(harness, "elastic", "ml-train")
    assert (shown["phase"], shown["restarts"]) == ("Running", 0)


async def test_a_growing_gang_whose_job_is_deleted_is_torn_down_whole(wide: Harness) -> None:
    """The added pods cannot start (their nodes are tainted); the TrainingJob is deleted
    meanwhile: every pod and claim of the gang goes, the added ones too, and the store
    releases all its devices."""
    harness = wide
    harness.start()
    blocker = await _running_at_two(harness, "elastic", **NOT_GROWN_BY_THE_CYCLE)
    await _delete(harness, blocker)
    for node in await _free_nodes(harness):
        taint = {"key": "maintenance", "effect": "NoSchedule"}
        await harness.kube.patch(resources.NODES, "", node, {"spec": {"taints": [taint]}})
    await _grow(harness, "elastic", leader="a")
    harness.start("b")
    await wait_for(lambda: sorted(_claims(harness, "elastic")) == [0, 1, 2, 3])
    await wait_for(lambda: sorted(_pods(harness, "elastic")) == [0, 1, 2, 3])
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "elastic")
    await wait_for(lambda: not _claims(harness, "elastic") and not _pods(harness, "elastic"))
    await _until_released(harness, "elastic")
    async with harness.engine.connect() as connection:
        query = text("SELECT phase, grown_from FROM jobs WHERE name = 'elastic'")
        phase, grown_from = (await connection.execute(query)).one()
    assert (phase, grown_from) == ("Failed", None)


async def _grown_after_crash(harness: Harness, job: str, *, index: int, borrowed: int) -> None:
    """The gang runs at 4 with every pod released and told its size, each replica's claim
    allocated, and the store holding exactly those replicas."""
    where = f"crash at write {index}"
    try:
        await wait_for(lambda: _size(harness, job) == "4/4")
    except AssertionError as error:
        raise AssertionError(f"{where}: {await _state(harness, job)}") from error
    pods = _pods(harness, job)
    assert sorted(pods) == [0, 1, 2, 3], f"{where}: {await _state(harness, job)}"
    assert all(not lifecycle.is_gated(p) for p in pods.values()), where
    await wait_for(
        lambda: all(
            p["metadata"]["annotations"][objects.SIZE] == "4" for p in _pods(harness, job).values()
        )
    )
    claims = _claims(harness, job)
    assert sorted(claims) == [0, 1, 2, 3], where
    assert all(objects.allocated_devices(c) for c in claims.values()), where
    assert await _row(harness, job) == ("Running", 4, None, borrowed + 16), where
    assert await _active_replicas(harness, job) == [0, 1, 2, 3], where


async def _undone_after_crash(harness: Harness, job: str, *, index: int, before: object) -> None:
    """The gang runs on at 2 with nothing of the grow left: neither pods nor claims of the
    added replicas, and the store holds what it held before the grow."""
    where = f"crash at write {index}"
    for _ in range(750):
        if await _row(harness, job) == before and sorted(_claims(harness, job)) == [0, 1]:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"{where}: {await _state(harness, job)}")
    assert sorted(_pods(harness, job)) == [0, 1], f"{where}: {await _state(harness, job)}"
    assert await _active_replicas(harness, job) == [0, 1], where
    await wait_for(lambda: _size(harness, job) == "2/4")


async def _grow_with_crash_at(harness: Harness, index: int, *, undone: bool) -> bool:
    """A gang at 2 of 4 grows; the controller is killed right after the `index`-th cluster
    write in its namespace once the grow is stored, then a new one takes over. With `undone`
    the added replicas' nodes are tainted so that their pods never start, and the grow is
    undone after its startup timeout. False when the grow took fewer writes."""
    job = f"{'undo' if undone else 'grow'}-{index}"
    spec = {"startupTimeoutSeconds": 2} if undone else {}
    harness.start("setup")
    await _delete(harness, await _running_at_two(harness, job, **spec, **NOT_GROWN_BY_THE_CYCLE))
    before = await _row(harness, job)
    tainted = await _free_nodes(harness) if undone else []
    for node in tainted:
        taint = {"key": "maintenance", "effect": "NoSchedule"}
        await harness.kube.patch(resources.NODES, "", node, {"spec": {"taints": [taint]}})
    await _grow(harness, job, leader="setup")
    holder = f"crash-{job}"
    killer = KillAfterWrite(harness, index, holder, namespace="ml-train")
    fired, over, doubles = killer.fired, killer.over, killer.doubles

    def settled() -> bool:
        if undone:
            return bool(bad_input.kube_events(harness, job, "ml-train", growing.GROW_FAILED))
        pods = _pods(harness, job).values()
        return _size(harness, job) == "4/4" and all(
            p["metadata"]["annotations"][objects.SIZE] == "4" for p in pods
        )

    listeners = harness.cluster.registry.storage.listeners
    listeners.append(killer)
    harness.start(holder)
    survivor = holder
    try:
        await wait_for(lambda: fired.is_set() or settled())
        # Writes after the grow settled (status refreshes) are not the grow's.
        over.set()
        if fired.is_set():
            await harness.kill(holder)
            survivor = f"{holder}-again"
            harness.start(survivor)
        if undone:
            await _undone_after_crash(harness, job, index=index, before=before)
        else:
            await _grown_after_crash(harness, job, index=index, borrowed=before[-1])
        assert not doubles, f"devices allocated twice after a crash at write {index}: {doubles}"
    finally:
        listeners.remove(killer)
    for node in tainted:
        await harness.kube.patch(resources.NODES, "", node, {"spec": {"taints": []}})
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: not _claims(harness, job) and harness.job(job) is None)
    await _until_released(harness, job)
    await harness.stop(survivor)
    return fired.is_set()


@pytest.mark.parametrize("undone", [False, True], ids=["grown", "undone"])
async def test_a_crash_at_any_write_of_a_grow_converges(wide: Harness, undone: bool) -> None:
    """After the restart the gang runs at its new size with every pod released, or, when
    its grow is undone, at its old size with nothing of the grow left; the store's
    reservations match the claims and no device is in two allocated claims."""
    index = 1
    while await _grow_with_crash_at(wide, index, undone=undone):
        index += 1
    assert index > 8, "a grow of two replicas takes more than eight writes"
    async with wide.engine.connect() as connection:
        active = await connection.scalar(
            text("SELECT count(*) FROM reservations WHERE released_at IS NULL")
        )
    assert active == 0
