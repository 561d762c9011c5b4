"""The fault soak's invariants, checked continuously from the emulator's objects and the REST API.

Owns the rules and their tolerances: no device in two allocated claims (at any instant); no
gang left half released (some pods gated, some not) for longer than a takeover and a
re-drive take; REST's phase of each job equal to its TrainingJob's once a difference has had
time to settle; and, at the end, no leaked pod, claim or Service (see `leaks`) and no job
stuck (neither terminal, nor refused as invalid, nor deleted). It must not change anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gangq.queue.bench.soak_jobs import Submitted
from gangq.queue.core import inventory
from gangq.queue.kube import objects, trainingjob
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.storage import Storage

PARTIAL_GRACE_S = 30.0
"""A gang may stay half released this long: a leader killed mid-release is replaced and the
release re-driven within it."""
REST_GRACE_S = 20.0
"""REST and the TrainingJob may disagree this long (a write in flight, a takeover)."""
TERMINAL = ("Succeeded", "Failed")
TRAINING_JOBS = "gangq.dev/trainingjobs"
REST_TIMEOUT = aiohttp.ClientTimeout(total=10)
DETAILS = 50
"""Details kept per kind of finding (the counts are exact)."""


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _job_of(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(inventory.JOB_NAME_LABEL)
    return None if name is None else f"{metadata.get('namespace')}/{name}"


def _is_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == objects.GATE for gate in gates)


@dataclass(slots=True)
class Findings:
    """Counts and the first few descriptions of each kind of finding."""

    counts: dict[str, int] = field(default_factory=dict)
    details: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        kept = self.details.setdefault(kind, [])
        if len(kept) < DETAILS:
            kept.append(text)


@dataclass(eq=False)
class Checker:
    storage: Storage
    token: str
    violations: Findings = field(default_factory=Findings)
    checks: int = 0
    rest_checks: int = 0
    _double: set[tuple[str, ...]] = field(default_factory=set)
    _partial_since: dict[str, float] = field(default_factory=dict)
    _partial_reported: set[str] = field(default_factory=set)
    _rest_since: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _rest_reported: set[tuple[str, str, str]] = field(default_factory=set)

    def items(self, key: str) -> Iterable[dict[str, Any]]:
        return list(self.storage.items(key))

    def check_cluster(self, *, now: float) -> None:
        """The instant checks: double allocation and half-released gangs."""
        self.checks += 1
        self._check_allocations()
        self._check_gangs(now=now)

    def _check_allocations(self) -> None:
        owners: dict[str, list[str]] = {}
        for claim in self.items(kinds.RESOURCE_CLAIMS.key):
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
                owners.setdefault(device, []).append(_key(claim))
        for device, claims in owners.items():
            if len(claims) > 1:
                seen = (device, *sorted(claims))
                if seen not in self._double:
                    self._double.add(seen)
                    self.violations.add(
                        "double_allocation", f"{device} allocated in {', '.join(sorted(claims))}"
                    )

    def _check_gangs(self, *, now: float) -> None:
        gated: dict[str, set[bool]] = {}
        for pod in self.items(kinds.PODS.key):
            job = _job_of(pod)
            if job is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            gated.setdefault(job, set()).add(_is_gated(pod))
        partial = {job for job, states in gated.items() if states == {True, False}}
        for job in list(self._partial_since):
            if job not in partial:
                del self._partial_since[job]
        for job in partial:
            since = self._partial_since.setdefault(job, now)
            if now - since > PARTIAL_GRACE_S and job not in self._partial_reported:
                self._partial_reported.add(job)
                self.violations.add(
                    "half_released_gang", f"{job}: some pods gated for {now - since:.0f}s"
                )

    async def check_rest(self, base_url: str, *, now: float) -> bool:
        """REST's phase of every job it lists against the TrainingJob's; False if unreachable."""
        listed = await self._rest_jobs(base_url)
        if listed is None:
            return False
        self.rest_checks += 1
        current: set[tuple[str, str, str]] = set()
        for job in self.items(TRAINING_JOBS):
            key = _key(job)
            rest = listed.get(key)
            phase = (job.get("status") or {}).get("phase")
            if rest is None or not phase or (job.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if rest["phase"] != phase:
                current.add((key, str(rest["phase"]), str(phase)))
        for difference in list(self._rest_since):
            if difference not in current:
                del self._rest_since[difference]
        for difference in current:
            since = self._rest_since.setdefault(difference, now)
            if now - since > REST_GRACE_S and difference not in self._rest_reported:
                self._rest_reported.add(difference)
                key, rest_phase, job_phase = difference
                self.violations.add(
                    "rest_differs",
                    f"{key}: REST says {rest_phase}, the TrainingJob {job_phase} "
                    f"for {now - since:.0f}s",
                )
        return True

    async def _rest_jobs(self, base_url: str) -> dict[str, dict[str, Any]] | None:
        headers = {"Authorization": f"Bearer {self.token}"}
        found: dict[str, dict[str, Any]] = {}
        offset = 0
        try:
            async with aiohttp.ClientSession(headers=headers, timeout=REST_TIMEOUT) as session:
                while True:
                    url = f"{base_url}/v1/jobs?limit=1000&offset={offset}"
                    async with session.get(url) as response:
                        if response.status != 200:
                            return None
                        page = await response.json()
                    for item in page["items"]:
                        found[f"{item['namespace']}/{item['name']}"] = item
                    offset += len(page["items"])
                    if not page["items"] or offset >= page["total"]:
                        return found
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    def leaks(self) -> Findings:
        """What outlives its purpose (call once settled): a claim of a job gone or finished
        (it would hold devices), a pod of a job gone or a live pod of a finished job, a
        Service of a job gone (a finished job keeps its Service until it is deleted)."""
        found = Findings()
        phases = {
            _key(job): (job.get("status") or {}).get("phase") for job in self.items(TRAINING_JOBS)
        }

        def report(kind: str, obj: Mapping[str, Any], job: str) -> None:
            found.add(kind, f"{kind} {_key(obj)} of {job} ({phases.get(job, 'gone')})")

        for claim in self.items(kinds.RESOURCE_CLAIMS.key):
            job = _job_of(claim)
            if job is not None and (job not in phases or phases[job] in TERMINAL):
                report("claim", claim, job)
        for pod in self.items(kinds.PODS.key):
            job = _job_of(pod)
            live = (pod.get("status") or {}).get("phase") not in TERMINAL
            if job is not None and (job not in phases or (phases[job] in TERMINAL and live)):
                report("pod", pod, job)
        for service in self.items("/services"):
            job = _job_of(service)
            if job is not None and job not in phases:
                report("service", service, job)
        return found

    def stuck(self, submitted: Iterable[Submitted]) -> Findings:
        """Jobs neither terminal, refused as invalid, nor (when deleted) gone."""
        found = Findings()
        by_key = {_key(job): job for job in self.items(TRAINING_JOBS)}
        pods: dict[str, list[str]] = {}
        for pod in self.items(kinds.PODS.key):
            state = str((pod.get("status") or {}).get("phase"))
            pods.setdefault(_job_of(pod) or "", []).append(
                f"{state} (gated)" if _is_gated(pod) else state
            )
        for job in submitted:
            obj = by_key.get(job.key)
            if job.deleted:
                if obj is not None:
                    found.add("deletion", f"{job.key} still exists after its deletion")
                continue
            if obj is None:
                found.add("vanished", f"{job.key} ({job.kind.name}) disappeared")
                continue
            job_status = obj.get("status") or {}
            phase = job_status.get("phase")
            if phase in TERMINAL:
                continue
            if job.kind.invalid and _is_invalid(job_status):
                continue
            found.add(
                "not_terminal",
                f"{job.key} ({job.kind.name}) {phase or 'no phase'}: {job_status.get('reason')} "
                f"(pods: {', '.join(sorted(pods.get(job.key, []))) or 'none'})",
            )
        return found

    def outcomes(self, submitted: Iterable[Submitted]) -> dict[str, int]:
        by_key = {_key(job): job for job in self.items(TRAINING_JOBS)}
        counts: dict[str, int] = {}
        for job in submitted:
            obj = by_key.get(job.key)
            if job.deleted:
                outcome = "deleted"
            elif obj is None:
                outcome = "vanished"
            elif job.kind.invalid and _is_invalid(obj.get("status") or {}):
                outcome = "invalid"
            else:
                outcome = str((obj.get("status") or {}).get("phase") or "none").lower()
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def unsettled(self, submitted: Iterable[Submitted]) -> int:
        return sum(self.stuck(submitted).counts.values()) + sum(self.leaks().counts.values())


def _is_invalid(job_status: Mapping[str, Any]) -> bool:
    """Refused as invalid: Failed, or the InvalidSpec condition (the spec is waiting for an
    edit; it holds no reservation)."""
    if job_status.get("phase") == "Failed":
        return True
    return any(
        condition.get("reason") == trainingjob.INVALID_SPEC
        for condition in job_status.get("conditions") or []
    )
