"""Scale-up and scale-down of long-running jobs as queue entries of their own (PRODUCT §5).

The added replicas of a running job are admitted all-or-nothing as a gang of their own, with
the job's tier, tenant and preemption rights: a queue entry `ns/<job>+<first replica>` (a name
no TrainingJob can have, `+` is not allowed there) whose uid is
`<job uid>.<first replica>.<milliseconds>` (a valid label value, new for every scale-up).
Owns those names and the arithmetic of what to add or remove; it performs no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from gangq.queue.core import model
from gangq.queue.store import jobs

SEPARATOR = "+"
UID_SEPARATOR = "."
"""Kubernetes uids are UUIDs (no dots), and the gang uid must be a valid label value."""
FINISHED = ("Succeeded", "Failed")


def split_name(name: str) -> tuple[str, int]:
    """A queue entry's name into the TrainingJob's name and the entry's first replica."""
    base, separator, first = name.partition(SEPARATOR)
    return base, int(first) if separator and first.isdigit() else 0


def job_uid(gang_uid: str) -> str:
    return gang_uid.partition(UID_SEPARATOR)[0]


def first_replica(key: str) -> int:
    return split_name(key.partition("/")[2])[1]


def uid_prefix(job_uid: str) -> str:
    """What the uid of every scale-up entry of the job with this uid starts with."""
    return f"{job_uid}{UID_SEPARATOR}"


@dataclass(frozen=True, slots=True)
class Plan:
    """`add` replicas starting at `first` (0 adds nothing); `drop` queue entries to end;
    `shrink_to` > 0: the job's own gang gives back its replicas from there on."""

    first: int = 0
    add: int = 0
    drop: tuple[jobs.JobRecord, ...] = ()
    shrink_to: int = 0


def plan(wanted: int, *, base: jobs.JobRecord, extensions: Iterable[jobs.JobRecord]) -> Plan:
    """What brings a running job from its queue entries to `wanted` replicas.

    Scale-down ends whole scale-up entries from the highest replica down (a partly needed
    entry ends too, and the remainder is added back as a new entry); below the job's own
    replicas, once no scale-up entry is left, the job's own gang shrinks.
    """
    live = sorted(
        (e for e in extensions if e.phase not in FINISHED),
        key=lambda e: split_name(e.key.partition("/")[2])[1],
    )
    covered = base.replicas
    kept: list[jobs.JobRecord] = []
    drop: list[jobs.JobRecord] = []
    for entry in live:
        first = first_replica(entry.key)
        if first + entry.replicas <= max(wanted, base.replicas):
            kept.append(entry)
            covered = max(covered, first + entry.replicas)
        else:
            drop.append(entry)
    if drop:
        return Plan(drop=tuple(drop))
    if 1 <= wanted < base.replicas:
        return Plan(shrink_to=wanted)
    if wanted > covered:
        return Plan(first=covered, add=wanted - covered)
    return Plan()


def extension(job: model.PendingJob, *, first: int, add: int, now: float) -> model.PendingJob:
    """The queue entry for replicas `first .. first + add - 1` of a running job: all of
    them, an elastic job's included (only a job's own gang starts at a size of its choice)."""
    namespace, _, name = job.key.partition("/")
    return dataclasses.replace(
        job,
        key=model.JobKey(f"{namespace}/{name}{SEPARATOR}{first}"),
        uid=f"{uid_prefix(job.uid)}{first}{UID_SEPARATOR}{round(now * 1000)}",
        replicas=add,
        submitted_at=now,
        min_replicas=None,
    )
