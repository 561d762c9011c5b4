"""What a demo run observed: per-job history, the timeline and every invariant check.

Owns turning watch events (TrainingJobs, Pods, ResourceClaims, ResourceSlices as dicts, stamped
with seconds since the start of the run) into job records and timeline lines, and feeding the
gang, device and counter checks. It does no I/O and judges nothing about the story
(`story.py` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.demo import counters, devices, gangs

TRAINING_JOBS = "trainingjobs"
PODS = "pods"
CLAIMS = "resourceclaims"
SLICES = "resourceslices"
DELETED = "DELETED"
TERMINAL = frozenset({"Succeeded", "Failed"})


def object_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


@dataclass
class JobRecord:
    key: str
    tier: str
    replicas: int
    submitted_at: float
    phase: str = ""
    phases: set[str] = field(default_factory=set)
    """Every phase the TrainingJob showed."""
    reasons: list[str] = field(default_factory=list)
    """Every distinct pending reason, in the order seen."""
    admitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    controller_skew_ms: int | None = None
    running_pods: set[str] = field(default_factory=set)
    max_running_pods: int = 0
    stopped_pods: int = 0
    """Pods deleted while Running (preempted or torn down), observed on the pods."""
    pods_stopped_at: float | None = None
    """When the last running pod stopped (finished or deleted)."""
    nodes: list[str] = field(default_factory=list)
    """The nodes of the latest placement, by replica."""
    on_slices: bool = False
    """A running pod of it held a partition or a share of a GPU (seen on its claims)."""


@dataclass
class Ledger:
    identity_attributes: Mapping[str, str]
    echo: Callable[[float, str], None] | None = None
    """Called with every timeline line as it happens (progress output)."""
    domains: Mapping[str, str] = field(default_factory=dict)
    """Node -> topology domain (e.g. its rack), to say where gangs were placed."""
    gangs: gangs.GangTracker = field(default_factory=gangs.GangTracker)
    devices: devices.DeviceLedger = field(default_factory=devices.DeviceLedger)
    counters: counters.CounterLedger = field(default_factory=counters.CounterLedger)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    violations: list[tuple[float, str]] = field(default_factory=list)
    _pod_phase: dict[str, str] = field(default_factory=dict)

    def say(self, at: float, text: str) -> None:
        self.timeline.append((at, text))
        if self.echo is not None:
            self.echo(at, text)

    def _violate(self, at: float, lines: list[str]) -> None:
        for line in lines:
            self.violations.append((at, line))
            self.say(at, f"VIOLATION {line}")

    def on_event(self, kind: str, kind_of_event: str, obj: Mapping[str, Any], *, at: float) -> None:
        """One watch event; `kind_of_event` is ADDED, MODIFIED or DELETED."""
        current = None if kind_of_event == DELETED else obj
        key = object_key(obj)
        if kind == TRAINING_JOBS:
            self._on_job(key, current, at=at)
        elif kind == PODS:
            self._on_pod(key, obj, current, at=at)
        elif kind == CLAIMS:
            self._violate(at, self.devices.on_claim(key, current))
            self._violate(at, self.counters.on_claim(key, current))
        elif kind == SLICES and current is not None:
            self.devices.add_slice(current, attributes=self.identity_attributes)
            self.counters.add_slice(current)

    def tick(self, *, at: float) -> None:
        self._violate(at, self.gangs.tick(at=at))

    def finish(self, *, at: float) -> None:
        self._violate(at, self.gangs.finish(at=at))

    def _on_job(self, key: str, job: Mapping[str, Any] | None, *, at: float) -> None:
        if job is None:
            self.say(at, f"{key} deleted")
            return
        spec, status = job.get("spec") or {}, job.get("status") or {}
        record = self.jobs.get(key)
        if record is None:
            record = self.jobs[key] = JobRecord(
                key, str(spec.get("tier")), int(spec.get("replicas", 0)), submitted_at=at
            )
            self.say(
                at,
                f"{key} submitted ({record.tier}, {record.replicas} x "
                f"{spec.get('devicesPerReplica')} devices)",
            )
        if int(spec.get("replicas", 0)) != record.replicas:
            self.say(at, f"{key} scaled from {record.replicas} to {spec.get('replicas')} replicas")
            record.replicas = int(spec.get("replicas", 0))
        self.gangs.on_job(key, replicas=record.replicas)
        preemptions = int(status.get("preemptions") or 0)
        if preemptions > record.preemptions:
            self.say(at, f"{key} preempted")
            record.preemptions = preemptions
        if status.get("releaseSkewMs") is not None:
            skew = int(status["releaseSkewMs"])
            record.controller_skew_ms = max(skew, record.controller_skew_ms or 0)
        self._on_placement(record, status.get("placement") or [], at=at)
        phase, reason = str(status.get("phase") or ""), str(status.get("reason") or "")
        if phase and phase != record.phase:
            self._on_phase(record, phase, reason, at=at)
        elif reason and _code(reason) not in {_code(r) for r in record.reasons}:
            self.say(at, f"{key} {phase}: {reason}")
        if reason and reason not in record.reasons:
            record.reasons.append(reason)

    def _on_placement(self, record: JobRecord, placement: list[Any], *, at: float) -> None:
        replicas = sorted(placement, key=lambda p: int(p.get("replica", 0)))
        nodes = [str(p.get("node")) for p in replicas]
        if not nodes or nodes == record.nodes:
            return
        record.nodes = nodes
        if len(nodes) > 1:
            domains = sorted({self.domains.get(node, "?") for node in nodes})
            self.say(at, f"{record.key} placed on {', '.join(nodes)} ({', '.join(domains)})")

    def _on_phase(self, record: JobRecord, phase: str, reason: str, *, at: float) -> None:
        record.phase = phase
        record.phases.add(phase)
        if phase in ("Admitted", "Running") and record.admitted_at is None:
            record.admitted_at = at
        if phase == "Running" and record.started_at is None:
            record.started_at = at
        if phase in TERMINAL:
            record.finished_at = at
        self.say(at, f"{record.key} {phase}" + (f": {reason}" if reason else ""))

    def _on_pod(
        self, key: str, obj: Mapping[str, Any], pod: Mapping[str, Any] | None, *, at: float
    ) -> None:
        metadata = obj.get("metadata") or {}
        job_name = (metadata.get("labels") or {}).get(gangs.JOB_LABEL)
        self._violate(at, self.devices.on_pod(key, pod))
        if job_name is None:
            return
        job = f"{metadata.get('namespace')}/{job_name}"
        for line in self.gangs.on_pod(job, str(metadata.get("name")), pod, at=at):
            if line.startswith("partial start"):
                self._violate(at, [line])
            else:
                self.say(at, line)
        record = self.jobs.get(job)
        if record is not None:
            self._track_running(record, key, pod, at=at)

    def _track_running(
        self, record: JobRecord, key: str, pod: Mapping[str, Any] | None, *, at: float
    ) -> None:
        phase = "" if pod is None else str((pod.get("status") or {}).get("phase") or "")
        is_deleting = pod is None or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        if phase == "Running" and not is_deleting and pod is not None:
            namespace = str((pod.get("metadata") or {}).get("namespace"))
            claims = devices.pod_claim_names(pod)
            if any(self.counters.is_fraction(f"{namespace}/{claim}") for claim in claims):
                if not record.on_slices:
                    self.say(at, f"{record.key} runs on a GPU slice")
                record.on_slices = True
            record.running_pods.add(key)
            record.max_running_pods = max(record.max_running_pods, len(record.running_pods))
        elif key in record.running_pods:
            record.running_pods.discard(key)
            if phase == "Running" or (pod is None and self._pod_phase.get(key) == "Running"):
                record.stopped_pods += 1
                self.say(at, f"{record.key} lost a running pod")
            if not record.running_pods:
                record.pods_stopped_at = at
        if pod is None:
            self._pod_phase.pop(key, None)
        else:
            self._pod_phase[key] = phase


def _code(reason: str) -> str:
    """`capacity` of `capacity: needs 4 nodes ...`: new codes are news, new numbers are not."""
    return reason.partition(":")[0]
