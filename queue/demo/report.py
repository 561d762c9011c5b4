"""How a demo run is told: timeline lines, the summary for a person and the one JSON object.

Owns the wording and the JSON field names (`jobs`, `partial_starts`, `double_allocations`,
`max_release_skew_ms`, `unique_device_ids`, `slice_jobs`, `counter_overcommits`, ...). Times
are seconds since the run started. It must not decide anything: the checks arrive judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.cli import table
from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import story


@dataclass(frozen=True, slots=True)
class Outcome:
    ledger: ledger_module.Ledger
    checks: tuple[story.Check, ...]
    duration_s: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(check.ok for check in self.checks)


def timeline_line(at: float, text: str) -> str:
    return f"[{at:5.1f}s] {text}"


_JOB_EVENT = re.compile(r"^(?P<namespace>[^/\s]+)/(?P<name>[^\s:]+) (?P<what>.+)$")


def condense(entries: Sequence[tuple[float, str]]) -> list[tuple[float, str]]:
    """Merge the same event of several jobs of one namespace into one line at its first place
    (twelve small jobs admitted at once read as one line). Meant for one short batch of
    entries; the JSON timeline keeps every entry."""
    groups: dict[int | str, tuple[float, str, list[str]]] = {}
    for index, (at, text) in enumerate(entries):
        match = _JOB_EVENT.match(text)
        if match is None:
            groups[index] = (at, text, [])
            continue
        head = f"{match['namespace']}/ {match['what']}"
        names = groups.setdefault(head, (at, head, []))[2]
        if match["name"] not in names:
            names.append(match["name"])
    return [(at, _join(text, names)) for at, text, names in groups.values()]


def _join(head: str, names: list[str]) -> str:
    if not names:
        return head
    namespace, _, what = head.partition("/ ")
    if len(names) <= 2:
        return f"{', '.join(f'{namespace}/{name}' for name in names)} {what}"
    return f"{namespace}/{names[0]} ... {names[-1]} {what} ({len(names)} jobs)"


@dataclass
class Progress:
    """Timeline lines for a person, printed in small batches so that runs of one event merge."""

    write: Callable[[str], None]
    pending: list[tuple[float, str]] = field(default_factory=list)

    def add(self, at: float, text: str) -> None:
        self.pending.append((at, text))

    def flush(self) -> None:
        for at, text in condense(self.pending):
            self.write(timeline_line(at, text))
        self.pending.clear()


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def jobs_json(observed: ledger_module.Ledger) -> list[dict[str, Any]]:
    rows = []
    for record in sorted(observed.jobs.values(), key=lambda r: (r.submitted_at, r.key)):
        namespace, _, name = record.key.partition("/")
        rows.append(
            {
                "name": name,
                "namespace": namespace,
                "tier": record.tier,
                "phase": record.phase,
                "replicas": record.replicas,
                "admitted_at": _seconds(record.admitted_at),
                "started_at": _seconds(record.started_at),
                "finished_at": _seconds(record.finished_at),
                "preemptions": record.preemptions,
                "nodes": record.nodes,
                "pods_stopped_while_running": record.stopped_pods,
                "on_slices": record.on_slices,
            }
        )
    return rows


def slice_jobs(observed: ledger_module.Ledger) -> int:
    """Jobs that ran on a partition or a share of a GPU, as their claims showed."""
    return sum(1 for record in observed.jobs.values() if record.on_slices)


def as_json(outcome: Outcome) -> dict[str, Any]:
    observed = outcome.ledger
    conflicts = observed.devices.identity_conflicts
    return {
        "ok": outcome.ok,
        "timed_out": outcome.timed_out,
        "duration_s": round(outcome.duration_s, 3),
        "jobs": jobs_json(observed),
        "partial_starts": len(observed.gangs.partial_starts),
        "partial_start_tolerance_ms": round(observed.gangs.tolerance_s * 1000),
        "double_allocations": len(observed.devices.double_allocations),
        "max_release_skew_ms": round(observed.gangs.max_release_skew_ms, 3),
        "releases": len(observed.gangs.releases),
        "controller_max_release_skew_ms": max(
            (
                r.controller_skew_ms
                for r in observed.jobs.values()
                if r.controller_skew_ms is not None
            ),
            default=None,
        ),
        "unique_device_ids": not conflicts and bool(observed.devices.checked_identities),
        "device_ids_checked": len(observed.devices.checked_identities),
        "device_id_conflicts": len(conflicts),
        "slice_jobs": slice_jobs(observed),
        "counter_overcommits": len(observed.counters.overcommits),
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in outcome.checks],
        "violations": [{"at": round(at, 3), "what": text} for at, text in observed.violations],
        "timeline": [{"at": round(at, 3), "event": text} for at, text in observed.timeline],
    }


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _jobs_table(observed: ledger_module.Ledger) -> str:
    rows: list[Sequence[str]] = [
        (
            row["namespace"] + "/" + row["name"],
            row["tier"],
            row["phase"] or "-",
            str(row["replicas"]),
            _cell(row["admitted_at"]),
            _cell(row["started_at"]),
            _cell(row["finished_at"]),
            str(row["preemptions"]),
        )
        for row in jobs_json(observed)
    ]
    headers = ("job", "tier", "phase", "replicas", "admitted", "started", "finished", "preempted")
    return table.render(headers, rows)


def summary(outcome: Outcome) -> str:
    observed = outcome.ledger
    lines = ["", "Jobs (times since the start of the run):", _jobs_table(observed), ""]
    lines.append(
        f"Releases: {len(observed.gangs.releases)} gangs, max skew "
        f"{observed.gangs.max_release_skew_ms:.0f} ms (first to last pod released, as watched)"
    )
    reported = [
        r.controller_skew_ms for r in observed.jobs.values() if r.controller_skew_ms is not None
    ]
    if reported:
        lines.append(f"          the controller reported at most {max(reported)} ms")
    counted = observed.counters
    lines.append(
        f"GPU slices: {slice_jobs(observed)} jobs ran on partitions or shares; "
        f"{len(counted.overcommits)} counter or capacity over-commits "
        f"({len(counted.counter_sets)} counter sets, {len(counted.capacities)} shared devices "
        "watched)"
    )
    lines.append("")
    lines.append("Checks:")
    lines += [f"  {'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}" for c in outcome.checks]
    if outcome.timed_out:
        lines.append(f"  FAIL  the scenario did not finish within {outcome.duration_s:.0f}s")
    verdict = "the story held and every invariant held" if outcome.ok else "FAILED"
    lines += ["", f"Demo {verdict} ({outcome.duration_s:.1f}s)."]
    return "\n".join(lines)
