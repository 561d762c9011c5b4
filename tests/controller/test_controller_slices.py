"""Small jobs on fractions of a GPU (rule 12), end to end against the emulator and PostgreSQL:
a MIG-like partition asked for by a selector, a share asked for by `capacity.requests`, and a
whole GPU refused while one of its partitions is held."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from gangq.queue.kube import resources
from gangq.queue.kube.client import KubeError
from gangq.queue.kubesim import cluster
from tests.controller.conftest import Harness, training_job, wait_for

DRIVER = "gpu.nvidia.com"
NODE = "part-0"
PARTITIONS = [("1g.10gb", 10, 1, 7), ("3g.40gb", 40, 3, 2)]
"""profile, memory GiB, compute slices, partitions per GPU (a 7-slice 80 GiB GPU)."""


def _device(name: str, profile: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "profile": {"string": profile},
            "uuid": {"string": f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{NODE}/{name}')}"},
        },
        **fields,
    }


def _slices() -> list[dict[str, Any]]:
    """The layout the API server accepts (cases 10-04, 10-05, 10-13): counters in one slice,
    the devices consuming them in another slice of the same pool, a shared GPU in its own."""
    counters = {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}
    devices = []
    for gpu in range(2):
        counter_set = f"gpu-{gpu}-cs"
        devices.append(
            _device(
                f"gpu-{gpu}",
                "whole",
                capacity={"memory": {"value": "80Gi"}},
                consumesCounters=[{"counterSet": counter_set, "counters": counters}],
            )
        )
        for profile, memory, slices, parts in PARTITIONS:
            for part in range(parts):
                devices.append(
                    _device(
                        f"gpu-{gpu}-{profile.replace('.', '')}-{part}",
                        profile,
                        capacity={"memory": {"value": f"{memory}Gi"}},
                        consumesCounters=[
                            {
                                "counterSet": counter_set,
                                "counters": {
                                    "memory": {"value": f"{memory}Gi"},
                                    "slices": {"value": str(slices)},
                                },
                            }
                        ],
                    )
                )
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 2}
    policy = {"default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": pool,
                "sharedCounters": [{"name": f"gpu-{g}-cs", "counters": counters} for g in range(2)],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-devices"},
            "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": devices},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-shared"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": f"{NODE}-shared", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    _device(
                        "shared-0",
                        "shared",
                        allowMultipleAllocations=True,
                        capacity={"memory": {"value": "80Gi", "requestPolicy": policy}},
                    )
                ],
            },
        },
    ]


def _profile(profile: str) -> list[str]:
    return [f'device.attributes["{DRIVER}"].profile == "{profile}"']


def _results(harness: Harness, claim: str) -> list[dict[str, Any]]:
    for found in harness.objects(resources.RESOURCE_CLAIMS, "ml-train"):
        if found["metadata"]["name"] == claim:
            return list(found["status"]["allocation"]["devices"]["results"])
    raise AssertionError(f"no claim {claim}")


async def test_slice_jobs_get_partitions_and_shares_never_overcommitted(harness: Harness) -> None:
    partitioned = cluster.Inventory(nodes=1, node_prefix="part")
    await harness.kube.create(resources.NODES, "", cluster.node(partitioned, 0))
    for body in _slices():
        await harness.kube.create(resources.RESOURCE_SLICES, "", body)
    harness.start()
    small = {"replicas": 1, "devices": 1, "run_seconds": None, "tier": "small"}
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("mig", selectors=_profile("1g.10gb"), **small),
    )
    await wait_for(lambda: harness.phase("mig") == "Running")
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job(
            "share",
            selectors=_profile("shared"),
            capacity={"requests": {"memory": "15Gi"}},
            **small,
        ),
    )
    await wait_for(lambda: harness.phase("share") == "Running")
    (partition,) = _results(harness, "mig-0")
    assert (partition["pool"], partition["device"]) == (NODE, "gpu-0-1g10gb-0")
    assert "shareID" not in partition and "consumedCapacity" not in partition
    (share,) = _results(harness, "share-0")
    assert (share["pool"], share["device"]) == (f"{NODE}-shared", "shared-0")
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", share["shareID"]
    )
    assert share["consumedCapacity"] == {"memory": "20Gi"}, "15Gi rounded up to a 10Gi step"
    claim = await harness.kube.get(resources.RESOURCE_CLAIMS, "ml-train", "share-0")
    request = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert request["capacity"] == {"requests": {"memory": "15Gi"}}
    pods = {p["metadata"]["name"]: p for p in harness.objects(resources.PODS, "ml-train")}
    assert pods["mig-0"]["spec"]["nodeName"] == NODE

    # gpu-0 is partitioned: of two whole-GPU jobs only one fits (gpu-1); the other waits
    for name in ("whole-a", "whole-b"):
        await harness.kube.create(
            resources.TRAINING_JOBS,
            "ml-train",
            training_job(name, selectors=_profile("whole"), **small),
        )
    await wait_for(
        lambda: {harness.phase("whole-a"), harness.phase("whole-b")} == {"Running", "Queued"}
    )
    running = "whole-a" if harness.phase("whole-a") == "Running" else "whole-b"
    waiting = "whole-b" if running == "whole-a" else "whole-a"
    assert [r["device"] for r in _results(harness, f"{running}-0")] == ["gpu-1"]
    reason = await wait_for(lambda: (harness.job(waiting) or {}).get("status", {}).get("reason"))
    assert reason.startswith("capacity")


async def test_the_crd_refuses_a_malformed_capacity_request(harness: Harness) -> None:
    for requests, message in (
        ({"memory": "ten gigs"}, "spec.capacity.requests.memory"),
        ({"memory": "-1Gi"}, "spec.capacity.requests.memory"),
        ({"GPU memory": "10Gi"}, "capacity names are C identifiers"),
    ):
        body = training_job("bad", capacity={"requests": requests}, replicas=1, devices=1)
        with pytest.raises(KubeError, match=re.escape(message)) as refused:
            await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
        assert refused.value.status == 422


async def test_shares_of_a_device_never_exceed_its_capacity(harness: Harness) -> None:
    partitioned = cluster.Inventory(nodes=1, node_prefix="part")
    await harness.kube.create(resources.NODES, "", cluster.node(partitioned, 0))
    for body in _slices():
        await harness.kube.create(resources.RESOURCE_SLICES, "", body)
    harness.start()
    names = [f"share-{i}" for i in range(3)]
    for name in names:
        await harness.kube.create(
            resources.TRAINING_JOBS,
            "ml-train",
            training_job(
                name,
                selectors=_profile("shared"),
                capacity={"requests": {"memory": "35Gi"}},
                replicas=1,
                devices=1,
                run_seconds=None,
                tier="small",
            ),
        )
    # 35Gi rounds up to 40Gi (validRange step 10Gi): two shares fill the 80Gi device
    await wait_for(
        lambda: sorted(str(harness.phase(n)) for n in names) == ["Queued", "Running", "Running"]
    )
    running = [n for n in names if harness.phase(n) == "Running"]
    shares = [_results(harness, f"{n}-0")[0] for n in running]
    assert [s["consumedCapacity"] for s in shares] == [{"memory": "40Gi"}] * 2
    assert shares[0]["shareID"] != shares[1]["shareID"]
    waiting = next(n for n in names if harness.phase(n) == "Queued")
    reason = await wait_for(lambda: (harness.job(waiting) or {}).get("status", {}).get("reason"))
    assert reason.startswith("capacity")
