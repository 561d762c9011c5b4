"""The end-to-end bench's job mix: Kueue's published shape, as TrainingJob documents.

Owns the three sizes and their weights (mostly small), the tenants' namespaces and the
document of each job. It must not talk to the cluster: `e2e` submits what this builds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from gangq.queue.demo import player

TENANT_LABEL = "gangq.dev/tenant"
DEVICE_CLASS = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class Size:
    name: str
    replicas: int
    devices_per_replica: int
    tier: str
    weight: float


SIZES: tuple[Size, ...] = (
    Size("small", 1, 1, "small", 0.80),
    Size("medium-1x8", 1, 8, "training", 0.08),
    Size("medium-2x8", 2, 8, "training", 0.07),
    Size("large", 4, 8, "training", 0.05),
)
"""Like Kueue's benchmark: mostly small jobs, some medium, a few large gangs."""


@dataclass(frozen=True, slots=True)
class Job:
    namespace: str
    name: str
    size: Size

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def namespace(tenant: int) -> str:
    return f"tenant-{tenant:02d}"


def tenant_name(tenant: int) -> str:
    return f"team-{tenant:02d}"


def jobs(count: int, *, tenants: int, seed: int, prefix: str = "job") -> list[Job]:
    """`count` jobs spread round-robin over the tenants, sizes drawn by weight."""
    draw = random.Random(seed)
    sizes = draw.choices(SIZES, weights=[size.weight for size in SIZES], k=count)
    return [
        Job(namespace(index % tenants), f"{prefix}-{index:05d}", size)
        for index, size in enumerate(sizes)
    ]


def document(job: Job, *, run_seconds: float) -> dict[str, Any]:
    """The TrainingJob; the emulated kubelet ends each pod after `run_seconds`."""
    return {
        "apiVersion": f"{player.GROUP}/{player.VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "tier": job.size.tier,
            "replicas": job.size.replicas,
            "devicesPerReplica": job.size.devices_per_replica,
            "deviceClassName": DEVICE_CLASS,
            "maxRestarts": 0,
            "template": {
                "metadata": {"annotations": {"sim.gangq.dev/run-seconds": f"{run_seconds:g}"}},
                "spec": {"containers": [{"name": "work", "image": "busybox:1.36"}]},
            },
        },
    }
