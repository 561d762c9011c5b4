"""Whether a demo run told the reference story, and whether its invariants held.

Owns the checks the exit code depends on, each phrased for a person with the numbers behind
it: no partial start, no double allocation, unique device identities on running pods, no
counter or capacity over-commit, the waiting gang admitted whole only after the blocker's pods
stopped, small jobs backfilling, slice jobs running on partitions or shares, the prod scale-up
reaching its replicas and preempting only the allowed tiers. Pure: it reads a
`Ledger` and the scenario's roles.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection
from dataclasses import dataclass

from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import scenario


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def invariants(observed: ledger_module.Ledger) -> list[Check]:
    partial = observed.gangs.partial_starts
    double = observed.devices.double_allocations
    conflicts = observed.devices.identity_conflicts
    checked = len(observed.devices.checked_identities)
    unidentified = len(observed.devices.unidentified)
    overcommits = observed.counters.overcommits
    return [
        Check(
            "no partial start",
            not partial,
            f"{len(partial)} gang(s) partly released, {len(observed.gangs.releases)} releases seen",
        ),
        Check(
            "no double allocation",
            not double,
            f"{len(double)} device(s) in two allocated claims at once",
        ),
        Check(
            "unique device ids on running pods",
            not conflicts and checked > 0 and unidentified == 0,
            f"{checked} device identities checked, {len(conflicts)} shared by two running pods, "
            f"{unidentified} without an identity attribute",
        ),
        Check(
            "no counter or capacity over-commit",
            not overcommits,
            f"{len(overcommits)} counter set(s) or shared device(s) over-committed"
            + "".join(f"; {found.describe()}" for found in list(overcommits.values())[:3]),
        ),
    ]


REASON_CODES = ("quota", "capacity", "backfill", "preemption")
"""Pending reason codes a person can act on (PRODUCT rule 10)."""


def actionable_reasons(record: ledger_module.JobRecord) -> list[str]:
    """The pending reasons that say why the job waits, not merely that it does."""
    return [r for r in record.reasons if r.partition(":")[0] in REASON_CODES]


def _record(observed: ledger_module.Ledger, key: str) -> ledger_module.JobRecord | None:
    return observed.jobs.get(key)


def _waited_whole(observed: ledger_module.Ledger, story: scenario.Story) -> Check:
    waiting, blocker = _record(observed, story.waiting), _record(observed, story.blocker)
    name = f"{story.waiting} waited whole for {story.blocker}"
    if waiting is None or blocker is None:
        return Check(name, False, "the jobs were not observed")
    partial = [p for p in observed.gangs.partial_starts if p.job == story.waiting]
    freed = blocker.pods_stopped_at
    reasons = actionable_reasons(waiting)
    ok = (
        bool(reasons)
        and not partial
        and waiting.admitted_at is not None
        and freed is not None
        and waiting.admitted_at >= freed
        and waiting.phase == "Succeeded"
    )
    return Check(
        name,
        ok,
        f"pending reason {reasons[0] if reasons else 'none'!r}; admitted at "
        f"{_at(waiting.admitted_at)}, {story.blocker} pods stopped at {_at(freed)}; "
        f"{len(partial)} partial start(s); ended {waiting.phase or 'unknown'}",
    )


def _backfilled(observed: ledger_module.Ledger, story: scenario.Story) -> Check:
    waiting = _record(observed, story.waiting)
    limit = None if waiting is None else waiting.started_at
    small = [r for k, r in observed.jobs.items() if fnmatch.fnmatchcase(k, story.backfill)]
    early = [
        r for r in small if r.started_at is not None and limit is not None and r.started_at < limit
    ]
    return Check(
        f"{story.backfill} backfilled before {story.waiting} started",
        bool(early),
        f"{len(early)} of {len(small)} started before {_at(limit)}",
    )


def _on_slices(observed: ledger_module.Ledger, pattern: str) -> Check:
    matching = [r for k, r in observed.jobs.items() if fnmatch.fnmatchcase(k, pattern)]
    sliced = [r for r in matching if r.on_slices]
    return Check(
        f"{pattern} ran on GPU partitions or shares",
        bool(sliced) and len(sliced) == len(matching),
        f"{len(sliced)} of {len(matching)} held a partition or a share while running",
    )


def _scaled(observed: ledger_module.Ledger, story: scenario.Story) -> Check:
    prod = _record(observed, story.prod)
    most = 0 if prod is None else prod.max_running_pods
    return Check(
        f"{story.prod} runs {story.scaled_replicas} replicas",
        most >= story.scaled_replicas and prod is not None and prod.phase == "Running",
        f"at most {most} pods running at once, phase {prod.phase if prod else 'unknown'}",
    )


def _victims(observed: ledger_module.Ledger, story: scenario.Story) -> Check:
    victims = [r for r in observed.jobs.values() if r.preemptions > 0 or r.stopped_pods > 0]
    wrong = [r for r in victims if r.tier not in story.victim_tiers]
    allowed = ", ".join(story.victim_tiers)
    names = ", ".join(f"{r.key} ({r.tier})" for r in victims) or "none"
    return Check(
        f"the scale-up preempted only {allowed} jobs",
        bool(victims) and not wrong,
        f"preempted: {names}",
    )


def _one_domain(observed: ledger_module.Ledger, story: scenario.Story) -> Check:
    placed = {}
    for key in story.one_domain:
        record = observed.jobs.get(key)
        nodes = [] if record is None else record.nodes
        placed[key] = sorted({observed.domains.get(node, "?") for node in nodes})
    return Check(
        "gangs kept in one topology domain",
        all(len(domains) == 1 and "?" not in domains for domains in placed.values()),
        "; ".join(f"{key}: {', '.join(d) or 'never placed'}" for key, d in placed.items()),
    )


def _all_ended(observed: ledger_module.Ledger, long_running: Collection[str]) -> Check:
    finite = [r for r in observed.jobs.values() if r.tier not in long_running]
    done = [r for r in finite if r.phase == "Succeeded"]
    return Check(
        "every finite job succeeded",
        bool(finite) and len(done) == len(finite),
        f"{len(done)} of {len(finite)} succeeded",
    )


def expectations(
    observed: ledger_module.Ledger, story: scenario.Story, *, long_running: Collection[str]
) -> list[Check]:
    return [
        _waited_whole(observed, story),
        _backfilled(observed, story),
        *([_on_slices(observed, story.slices)] if story.slices else []),
        _scaled(observed, story),
        _victims(observed, story),
        *([_one_domain(observed, story)] if story.one_domain else []),
        _all_ended(observed, long_running),
    ]


def outstanding(
    observed: ledger_module.Ledger,
    story: scenario.Story,
    *,
    expected_jobs: int,
    long_running: Collection[str],
) -> list[str]:
    """What the run still waits for: unseen jobs, unfinished finite jobs, prod below size."""
    waiting = []
    if len(observed.jobs) < expected_jobs:
        waiting.append(f"{expected_jobs - len(observed.jobs)} job(s) not seen yet")
    for record in observed.jobs.values():
        if record.tier in long_running:
            if len(record.running_pods) < record.replicas:
                running = len(record.running_pods)
                waiting.append(f"{record.key} runs {running} of {record.replicas} replicas")
        elif record.phase not in ledger_module.TERMINAL:
            waiting.append(f"{record.key} is {record.phase or 'not reconciled yet'}")
    prod = observed.jobs.get(story.prod)
    if prod is None or prod.replicas < story.scaled_replicas:
        waiting.append(f"{story.prod} is not scaled to {story.scaled_replicas} replicas")
    return waiting


def _at(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"
