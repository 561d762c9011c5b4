"""What the end-to-end bench observes: when each job was created and when its pods were released.

Owns the per-job record (creation time, replicas, the moment each pod was first seen without
scheduling gates) and the figures computed from it. It must not watch or submit anything: `e2e`
feeds it times from the pod watch, so it stays free of I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.core import inventory
from gangq.queue.kube.objects import ADMISSION, GANG_LABEL


@dataclass(eq=False)
class _Record:
    replicas: int
    created: float | None = None
    released: dict[str, float] = field(default_factory=dict)


@dataclass(eq=False)
class Releases:
    """Jobs by `namespace/name`; pods may be seen before their job's creation call returns."""

    records: dict[str, _Record] = field(default_factory=dict)
    first_created: float | None = None
    last_released: float | None = None
    done: int = 0

    def expect(self, key: str, *, replicas: int) -> None:
        self.records[key] = _Record(replicas)

    def created(self, key: str, *, at: float) -> None:
        self.records[key].created = at
        if self.first_created is None:
            self.first_created = at

    def on_pod(self, obj: dict[str, Any], *, at: float) -> None:
        """Record the first moment the pod has no scheduling gates left."""
        metadata = obj.get("metadata") or {}
        job = (metadata.get("labels") or {}).get(inventory.JOB_NAME_LABEL)
        record = self.records.get(f"{metadata.get('namespace')}/{job}")
        pod = str(metadata.get("name"))
        if record is None or pod in record.released:
            return
        if (obj.get("spec") or {}).get("schedulingGates"):
            return
        record.released[pod] = at
        if len(record.released) == record.replicas:
            self.done += 1
            self.last_released = at

    def figures(self, *, now: float) -> dict[str, Any]:
        """The bench's figures; milliseconds for latencies, jobs per second over the run."""
        latencies, skews = [], []
        for record in self.records.values():
            if len(record.released) < record.replicas or record.created is None:
                continue
            times = record.released.values()
            latencies.append(max(max(times) - record.created, 0.0) * 1000)
            skews.append((max(times) - min(times)) * 1000)
        started = self.first_created if self.first_created is not None else now
        ended = self.last_released if self.done == len(self.records) else now
        span = max((ended or now) - started, 1e-9)
        return {
            "jobs": len(self.records),
            "released": self.done,
            "duration_s": round(span, 3),
            "jobs_per_s": round(self.done / span, 1),
            "release_p50_ms": round(percentile(latencies, 50), 1),
            "release_p99_ms": round(percentile(latencies, 99), 1),
            "release_skew_p99_ms": round(percentile(skews, 99), 1),
        }


def percentile(values: list[float], rank: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(math.ceil(rank / 100 * len(ordered)) - 1, 0)
    return ordered[index]


LIVE_PODS = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
"""A LIST of the pods not terminated: the kept pods of ended gangs cannot be partly bound, and
would make every LIST heavier as the run goes on."""


def partly_bound(pods: list[dict[str, Any]]) -> int:
    """Gang attempts some but not all of whose listed pods are bound to a node, in one
    consistent LIST: what a PodGroup rules out. An attempt is its gang label and admission
    stamp (pods keep their names across attempts); pods of one-pod gangs never count."""
    bound: dict[tuple[str, str, str], set[bool]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if not gang:
            continue
        attempt = (
            str(meta.get("namespace")),
            gang,
            (meta.get("annotations") or {}).get(ADMISSION, ""),
        )
        bound.setdefault(attempt, set()).add(bool((pod.get("spec") or {}).get("nodeName")))
    return sum(1 for states in bound.values() if len(states) > 1)
