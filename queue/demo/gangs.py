"""Whole-gang release as observed from pods: partial starts and release skew (PRODUCT rule 2).

Owns release windows: a window of a job opens when one of its pods carries the admission gate
(or a pod shows up without it) and closes when every replica exists and none is gated. Inside a
window the gang is *mixed* while some pod was released and another is still gated or missing;
a gang mixed for longer than the tolerance, or still mixed at the end, is a partial start. The
first-to-last release time of a closed window is its release skew. It does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GATE = "gangq.dev/admission"
JOB_LABEL = "gangq.dev/job-name"
REPLICA_LABEL = "gangq.dev/replica"


def is_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == GATE for gate in gates)


def replica_index(pod: Mapping[str, Any]) -> int | None:
    """The replica from the label, else from the `<job>-<replica>` name."""
    metadata = pod.get("metadata") or {}
    raw = (metadata.get("labels") or {}).get(REPLICA_LABEL)
    if raw is None:
        raw = str(metadata.get("name", "")).rpartition("-")[2]
    return int(raw) if str(raw).isdigit() else None


@dataclass(frozen=True, slots=True)
class Release:
    job: str
    at: float
    pods: int
    skew_ms: float


@dataclass(frozen=True, slots=True)
class PartialStart:
    job: str
    since: float
    released: tuple[str, ...]
    waiting: tuple[str, ...]
    """Pods still gated, and replicas missing as `#N`."""

    def describe(self) -> str:
        return (
            f"partial start of {self.job}: {', '.join(self.released)} released while "
            f"{', '.join(self.waiting)} gated or missing"
        )


@dataclass
class _Window:
    released: dict[str, float] = field(default_factory=dict)
    mixed_since: float | None = None
    is_partial: bool = False


@dataclass
class GangTracker:
    tolerance_s: float = 1.0
    """A gang may look mixed this long while its gates are being lifted concurrently."""
    gated: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Job key -> pod name -> gated, for pods that exist."""
    indices: dict[str, dict[str, int]] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)
    windows: dict[str, _Window] = field(default_factory=dict)
    releases: list[Release] = field(default_factory=list)
    partial_starts: list[PartialStart] = field(default_factory=list)

    def on_job(self, job: str, *, replicas: int) -> None:
        self.replicas[job] = replicas

    def on_pod(self, job: str, name: str, pod: Mapping[str, Any] | None, *, at: float) -> list[str]:
        """Record a pod of `job` (None when deleted); returns what the timeline should say."""
        pods = self.gated.setdefault(job, {})
        indices = self.indices.setdefault(job, {})
        was = pods.get(name)
        if pod is None:
            pods.pop(name, None)
            indices.pop(name, None)
        else:
            pods[name] = is_gated(pod)
            index = replica_index(pod)
            if index is not None:
                indices[name] = index
        window = self.windows.get(job)
        now_gated = pods.get(name)
        if window is None and (now_gated or (was is None and now_gated is False)):
            window = self.windows[job] = _Window()
        if window is not None and now_gated is False and was is not False:
            window.released[name] = at
        return self._evaluate(job, at=at)

    def tick(self, *, at: float) -> list[str]:
        """Let time pass: a gang that stays mixed becomes a partial start."""
        return [line for job in list(self.windows) for line in self._evaluate(job, at=at)]

    def finish(self, *, at: float) -> list[str]:
        """End of observation: a gang still mixed now is a partial start, whatever its age."""
        return [
            line
            for job in list(self.windows)
            for line in self._evaluate(job, at=at, tolerance_s=0.0)
        ]

    def _waiting(self, job: str) -> list[str]:
        pods = self.gated.get(job, {})
        waiting = sorted(name for name, gated in pods.items() if gated)
        present = set(self.indices.get(job, {}).values())
        expected = range(self.replicas.get(job, 0))
        return waiting + [f"#{index}" for index in expected if index not in present]

    def _evaluate(self, job: str, *, at: float, tolerance_s: float | None = None) -> list[str]:
        window = self.windows.get(job)
        if window is None:
            return []
        waiting = self._waiting(job)
        released = sorted(n for n in window.released if n in self.gated.get(job, {}))
        if not waiting:
            del self.windows[job]
            if not window.released:
                return []
            times = window.released.values()
            release = Release(job, max(times), len(times), (max(times) - min(times)) * 1000)
            self.releases.append(release)
            if release.pods == 1:
                return []
            return [f"{job}: {release.pods} pods released together, skew {release.skew_ms:.0f} ms"]
        if not released:
            window.mixed_since = None
            return []
        if window.mixed_since is None:
            window.mixed_since = at
        allowed = self.tolerance_s if tolerance_s is None else tolerance_s
        if window.is_partial or (allowed > 0 and at - window.mixed_since <= allowed):
            return []
        window.is_partial = True
        partial = PartialStart(job, window.mixed_since, tuple(released), tuple(waiting))
        self.partial_starts.append(partial)
        return [partial.describe()]

    @property
    def max_release_skew_ms(self) -> float:
        return max((release.skew_ms for release in self.releases), default=0.0)
