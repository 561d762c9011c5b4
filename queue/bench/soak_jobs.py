"""The fault soak's job mix: seeded TrainingJobs of every size and fate, and their deletions.

Owns the kinds (1-GPU jobs, 2x8 and 4x8 gangs, jobs whose pods fail, specs gangq must refuse,
specs the CRD refuses, jobs deleted at a random moment so every phase sees a deletion), their
documents, and what each may end as. Jobs are written straight into the in-process emulator's
registry: the soak's own writes must not meet the faults it injects into the controller's.
It must not check invariants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.demo import player
from gangq.queue.kubesim import deletion, kinds, status
from gangq.queue.kubesim.registry import Registry

DEVICE_CLASS = "gpu.nvidia.com"
TENANT_LABEL = "gangq.dev/tenant"
TENANTS = ("soak-a", "soak-b", "soak-c")
RUN_SECONDS = "sim.gangq.dev/run-seconds"
EXIT_CODE = "sim.gangq.dev/exit-code"


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    replicas: int
    devices: int
    tier: str
    weight: float
    fails: bool = False
    invalid: bool = False
    """gangq must refuse it (an unmanaged device class): never admitted, never a reservation."""
    refused: bool = False
    """The CRD refuses it at create time (422): it never exists."""


KINDS: tuple[Kind, ...] = (
    Kind("small", 1, 1, "small", 0.50),
    Kind("gang-2x8", 2, 8, "training", 0.14),
    Kind("gang-4x8", 4, 8, "training", 0.06),
    Kind("failing", 1, 1, "small", 0.10, fails=True),
    Kind("failing-gang", 2, 8, "training", 0.04, fails=True),
    Kind("bad-class", 1, 1, "small", 0.05, invalid=True),
    Kind("bad-tier", 1, 1, "no-such-tier", 0.05, invalid=True),
    Kind("too-many-replicas", 65, 1, "small", 0.06, refused=True),
)
IN_FLIGHT = 30
"""At most this many valid jobs unfinished at once: the mix keeps the cluster busy, but
arrivals beyond what it can run would only grow a queue that never drains."""
DELETE_SHARE = 0.15
"""Of the jobs created, this share is deleted at a random moment of its life."""


def namespace(tenant: str) -> str:
    return f"ns-{tenant}"


@dataclass(slots=True)
class Submitted:
    key: str
    kind: Kind
    created_at: float
    delete_at: float | None
    deleted: bool = False


@dataclass(slots=True)
class JobMix:
    """Draws and writes jobs; `due_deletions` tells which to delete now."""

    registry: Registry
    seed: int
    jobs: dict[str, Submitted] = field(default_factory=dict)
    refused: int = 0
    _draw: random.Random = field(init=False)
    _count: int = 0

    def __post_init__(self) -> None:
        self._draw = random.Random(self.seed)

    def resource(self) -> kinds.ResourceType:
        found = self.registry.resolve(player.GROUP, player.VERSION, player.PLURAL)
        assert found is not None, "the TrainingJob CRD is installed first"
        return found

    def in_flight(self) -> int:
        """Valid jobs submitted and not yet finished (nor being deleted)."""
        count = 0
        for obj in self.registry.storage.items(self.resource().store_key):
            metadata = obj.get("metadata") or {}
            submitted = self.jobs.get(f"{metadata.get('namespace')}/{metadata.get('name')}")
            if submitted is None or submitted.kind.invalid or metadata.get("deletionTimestamp"):
                continue
            if (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                count += 1
        return count

    def next_pause_s(self) -> float:
        return self._draw.uniform(0.2, 1.2)

    def submit(self, *, now: float) -> Submitted | None:
        """Create one job drawn from the mix; None when the CRD refused it (as it must)."""
        kind = self._draw.choices(KINDS, weights=[k.weight for k in KINDS])[0]
        tenant = self._draw.choice(TENANTS)
        name = f"soak-{self._count:05d}"
        self._count += 1
        body = self.document(name, kind, run_seconds=round(self._draw.uniform(2.0, 10.0), 1))
        try:
            self.registry.create(self.resource(), namespace(tenant), body)
        except status.ApiError as error:
            if kind.refused and error.code == 422:
                self.refused += 1
                return None
            raise
        if kind.refused:
            raise AssertionError(f"the CRD accepted {name}, which it must refuse")
        delete_at = (
            now + self._draw.uniform(0.0, 20.0) if self._draw.random() < DELETE_SHARE else None
        )
        submitted = Submitted(f"{namespace(tenant)}/{name}", kind, now, delete_at)
        self.jobs[submitted.key] = submitted
        return submitted

    def document(self, name: str, kind: Kind, *, run_seconds: float) -> dict[str, Any]:
        annotations = {RUN_SECONDS: f"{run_seconds:g}"}
        if kind.fails:
            annotations[EXIT_CODE] = "1"
        return {
            "apiVersion": f"{player.GROUP}/{player.VERSION}",
            "kind": "TrainingJob",
            "metadata": {"name": name},
            "spec": {
                "tier": kind.tier,
                "replicas": kind.replicas,
                "devicesPerReplica": kind.devices,
                "deviceClassName": "gpu.unknown.example.com" if kind.invalid else DEVICE_CLASS,
                "maxRestarts": 0,
                "startupTimeoutSeconds": 120,
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {"containers": [{"name": "work", "image": "busybox:1.36"}]},
                },
            },
        }

    def due_deletions(self, *, now: float) -> list[Submitted]:
        return [
            job
            for job in self.jobs.values()
            if job.delete_at is not None and not job.deleted and job.delete_at <= now
        ]

    def delete(self, job: Submitted) -> None:
        namespace_name, name = job.key.split("/", 1)
        job.deleted = True
        try:
            deletion.delete(
                self.registry, self.resource(), namespace_name, name, deletion.DeleteOptions()
            )
        except status.ApiError as error:
            if error.code != 404:
                raise

    def stop_deleting(self) -> None:
        """Deletions not yet due are dropped: the run is settling."""
        for job in self.jobs.values():
            if not job.deleted:
                job.delete_at = None
