"""Elastic jobs against the emulator and PostgreSQL (PRODUCT rule 13): the controller builds
the size the core chose, replicas 0..size-1, released together, and tells the pods, the
TrainingJob's status, `kubectl get` and REST that size."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.kube import objects, resources
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.storage import Event
from tests.controller import bad_input
from tests.controller.conftest import Harness, running_harness, training_job, wait_for

FOUR_NODES = Inventory(nodes=4, gpus_per_node=8, racks=2)
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def wide(engine: AsyncEngine) -> AsyncIterator[Harness]:
    async with running_harness(engine, inventory=FOUR_NODES) as built:
        yield built


def _pods(harness: Harness, job: str) -> list[dict[str, Any]]:
    return sorted(
        (
            p
            for p in harness.objects(resources.PODS, "ml-train")
            if p["metadata"]["labels"].get("gangq.dev/job-name") == job
        ),
        key=lambda p: p["metadata"]["name"],
    )


def _watch_releases(harness: Harness, job: str, *, size: int) -> list[list[str]]:
    """Every moment a pod of `job` ran ungated while fewer than `size` of its pods existed."""
    partial: list[list[str]] = []

    def on_pod(event: Event) -> None:
        if event.resource != kinds.PODS.key:
            return
        pods = _pods(harness, job)
        if len(pods) < size and any(not p["spec"].get("schedulingGates") for p in pods):
            partial.append([p["metadata"]["name"] for p in pods])

    harness.cluster.registry.storage.listeners.append(on_pod)
    return partial


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


async def _size_column(harness: Harness, job: str) -> str:
    """The Size cell `kubectl get tj` shows, from the server's table of TrainingJobs."""
    headers = {"Authorization": f"Bearer {harness.cluster.token}", "Accept": TABLE}
    path = "/apis/gangq.dev/v1alpha1/namespaces/ml-train/trainingjobs"
    async with (
        aiohttp.ClientSession() as session,
        session.get(harness.cluster.base_url + path, headers=headers) as response,
    ):
        assert response.status == 200
        table = await response.json()
    columns = [c["name"] for c in table["columnDefinitions"]]
    (row,) = [r for r in table["rows"] if r["cells"][0] == job]
    return str(row["cells"][columns.index("Size")])


async def test_an_elastic_job_that_fits_only_at_its_minimum_starts_whole_at_it(
    wide: Harness, database_url: str, tmp_path: Path
) -> None:
    """Two of four nodes run a gang without end: of at most 4 replicas, 2 start, and only
    replicas 0 and 1 get claims and pods, released together."""
    harness = wide
    partial = _watch_releases(harness, "elastic", size=2)
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("blocker", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("blocker") == "Running")
    body = training_job("elastic", replicas=4, run_seconds=2.0, elastic={"minReplicas": 2})
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase("elastic") == "Running")

    pods = _pods(harness, "elastic")
    assert [p["metadata"]["name"] for p in pods] == ["elastic-0", "elastic-1"]
    claims = [
        c["metadata"]["name"]
        for c in harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
        if c["metadata"]["name"].startswith("elastic-")
    ]
    assert sorted(claims) == ["elastic-0", "elastic-1"]
    assert not partial, f"released before every pod of the size existed: {partial}"
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    for rank, pod in enumerate(pods):
        env = _env(pod)
        assert (env["GANGQ_REPLICAS"], env["WORLD_SIZE"]) == ("2", "2")
        assert (env["GANGQ_MIN_REPLICAS"], env["GANGQ_MAX_REPLICAS"]) == ("2", "4")
        assert (env["GANGQ_REPLICA_INDEX"], env["NODE_RANK"]) == (str(rank), str(rank))
        assert env["MASTER_ADDR"] == "elastic-0.elastic"
        assert pod["metadata"]["annotations"][objects.SIZE] == "2"
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes[objects.PODINFO_VOLUME]["downwardAPI"]["items"] == [
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
        ]
    blocker = _env(_pods(harness, "blocker")[0])
    assert (blocker["GANGQ_MIN_REPLICAS"], blocker["GANGQ_MAX_REPLICAS"]) == ("2", "2")

    shown = bad_input.status_of(harness, "elastic", "ml-train")
    assert shown["size"] == "2/4" and len(shown["placement"]) == 2
    assert shown["releaseSkewMs"] >= 0
    assert await _size_column(harness, "elastic") == "2/4"
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", "elastic")
    assert (out["size"], out["minReplicas"], out["maxReplicas"]) == (2, 2, 4)
    assert [p["replica"] for p in out["placement"]] == [0, 1]

    await wait_for(lambda: harness.phase("elastic") == "Succeeded")
    ended = bad_input.status_of(harness, "elastic", "ml-train")
    assert ended["size"] == "2/4", "the size it ran at stays readable"
    assert ended["reason"] == "all 2 replicas succeeded"


async def test_an_elastic_job_whose_maximum_fits_starts_at_its_maximum(
    harness: Harness,
) -> None:
    harness.start()
    body = training_job("elastic", replicas=2, run_seconds=None, elastic={"minReplicas": 1})
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase("elastic") == "Running")
    pods = _pods(harness, "elastic")
    assert [p["metadata"]["name"] for p in pods] == ["elastic-0", "elastic-1"]
    for pod in pods:
        env = _env(pod)
        assert (env["GANGQ_REPLICAS"], env["WORLD_SIZE"]) == ("2", "2")
        assert (env["GANGQ_MIN_REPLICAS"], env["GANGQ_MAX_REPLICAS"]) == ("1", "2")
        assert pod["metadata"]["annotations"][objects.SIZE] == "2"
    assert bad_input.status_of(harness, "elastic", "ml-train")["size"] == "2/2"
    assert await _size_column(harness, "elastic") == "2/2"
