"""Kubernetes-shaped dicts and the reference story's roles, for the demo's observation tests."""

from __future__ import annotations

from typing import Any

from gangq.queue.demo import gangs
from gangq.queue.demo.scenario import Story

STORY = Story(
    prod="inference/llm",
    scaledReplicas=3,
    blocker="ml-train/big",
    waiting="ml-train/big-2",
    backfill="ci/*",
    victimTiers=("small",),
)
"""The roles of the reference story, as the checks read them."""
LONG_RUNNING = {"prod-inference"}


def pod(
    job: str,
    replica: int,
    *,
    gated: bool = True,
    phase: str = "Pending",
    namespace: str = "ml-train",
    claims: tuple[str, ...] = (),
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"{job}-{replica}",
        "namespace": namespace,
        "labels": {gangs.JOB_LABEL: job, gangs.REPLICA_LABEL: str(replica)},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    }
    if gated:
        spec["schedulingGates"] = [{"name": gangs.GATE}]
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def claim(
    name: str, *devices: str, namespace: str = "ml-train", pool: str = "gpu-0"
) -> dict[str, Any]:
    """A claim allocated `devices` (names in `pool`), or unallocated when none are given."""
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "status": {}}
    if devices:
        results = [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": pool, "device": d}
            for d in devices
        ]
        body["status"]["allocation"] = {"devices": {"results": results}}
    return body


def resource_slice(pool: str, uuids: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pool}-slice"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": pool},
            "devices": [
                {"name": name, "attributes": {"uuid": {"string": uuid}}}
                for name, uuid in uuids.items()
            ],
        },
    }


def training_job(
    name: str,
    *,
    namespace: str = "ml-train",
    tier: str = "training",
    replicas: int = 4,
    phase: str = "",
    reason: str = "",
    preemptions: int = 0,
    nodes: tuple[str, ...] = (),
) -> dict[str, Any]:
    status: dict[str, Any] = {"preemptions": preemptions}
    if nodes:
        status["placement"] = [{"replica": i, "node": node} for i, node in enumerate(nodes)]
    if phase:
        status["phase"] = phase
    if reason:
        status["reason"] = reason
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tier": tier, "replicas": replicas, "devicesPerReplica": 8},
        "status": status,
    }
