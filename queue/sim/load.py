"""Offered load: the device-time a trace asks for over its length, as a fraction of capacity.

Owns measuring it and bringing a generated week whose arrivals are Poisson streams (the
reference and mixed weeks) to a wanted load. The trace families reach theirs by construction
(`families.generate`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from gangq.queue.core import prediction
from gangq.queue.core.model import JobKey
from gangq.queue.sim.trace import Trace, TraceJob

BISECTION_STEPS = 40
MAX_WEEKS = 16
"""Independent weeks superposed at most (a load up to 16 times a week's own)."""


def offered_device_s(job: TraceJob, *, horizon_s: float) -> float:
    """Device-seconds the job asks for before the horizon: its GPU-equivalents for its run
    (until it ends, is stopped at `maxRuntime`, or the horizon comes)."""
    remaining = max(horizon_s - job.arrival_s, 0.0)
    run = remaining if job.run_s is None else min(job.run_s, remaining)
    return job.gpus * run


def offered_load(trace: Trace) -> float:
    """Offered device-time over the trace's length / (capacity x horizon)."""
    return _load(trace.jobs, trace)


def _load(jobs: tuple[TraceJob, ...] | list[TraceJob], trace: Trace) -> float:
    asked = sum(offered_device_s(job, horizon_s=trace.horizon_s) for job in jobs)
    return asked / (trace.cluster.capacity * trace.horizon_s)


def _scalable(job: TraceJob) -> bool:
    """Prod serving is the cluster's own and does not scale with the load."""
    return job.tier != "prod-inference"


def _renamed(job: TraceJob, week: int) -> TraceJob:
    """A job of the `week`-th added week, under its own name and in its original family."""
    namespace, _, name = job.key.rpartition("/")
    return dataclasses.replace(
        job,
        key=JobKey(f"{namespace}/w{week}-{name}"),
        family=job.family or prediction.family_of(name),
    )


class _Weeks:
    """Independent weeks of one generator, each job with a fixed draw that decides from
    which scale on it is kept."""

    def __init__(self, week: Callable[[int], Trace]) -> None:
        self.week = week
        self.base = week(0)
        self.prod = [job for job in self.base.jobs if not _scalable(job)]
        self.drawn: list[list[tuple[float, TraceJob]]] = []
        self.add()

    def add(self) -> None:
        index = len(self.drawn)
        trace = self.base if index == 0 else self.week(index)
        keep = random.Random(f"keep-{index}")
        jobs = [job if index == 0 else _renamed(job, index) for job in trace.jobs]
        self.drawn.append([(keep.random(), job) for job in jobs if _scalable(job)])

    def jobs(self, scale: float) -> list[TraceJob]:
        """Prod, then week k's jobs whose draw is below `scale - k`: a Poisson stream thinned
        by a fraction is the same stream at that fraction of its rate, and independent weeks
        superposed add their rates."""
        kept = [
            job
            for index, week in enumerate(self.drawn)
            for draw, job in week
            if draw < scale - index
        ]
        return [*self.prod, *kept]

    def load(self, scale: float) -> float:
        return _load(self.jobs(scale), self.base)


def at_load(week: Callable[[int], Trace], load: float) -> Trace:
    """The week at the arrival rate that offers `load`.

    `week(k)` is the k-th independent week of a generator (k = 0 the one asked for). A lower
    rate keeps a random subset of the week's jobs; a higher one adds a random part of further
    weeks. Every job has a fixed draw, so a heavier load keeps all the jobs of a lighter one
    and the offered load only grows with the rate: bisection finds the rate, to within one
    job's device-time. Prod serving stays as it is, so a load below its own is not reached."""
    weeks = _Weeks(week)
    while weeks.load(len(weeks.drawn)) < load and len(weeks.drawn) < MAX_WEEKS:
        weeks.add()
    low, high = 0.0, float(len(weeks.drawn))
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if weeks.load(middle) < load:
            low = middle
        else:
            high = middle
    scale = min((low, high), key=lambda s: abs(weeks.load(s) - load))
    jobs = sorted(weeks.jobs(scale), key=lambda job: (job.arrival_s, job.key))
    return dataclasses.replace(weeks.base, jobs=tuple(jobs))
