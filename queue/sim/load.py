"""Offered load: the device-time a trace asks for over its length, as a fraction of capacity.

Owns measuring it and bringing a rate-driven generator (the reference and mixed weeks) to a
wanted load. The trace families reach theirs by construction (`families.generate`).
"""

from __future__ import annotations

from collections.abc import Callable

from gangq.queue.sim.trace import Trace, TraceJob

CALIBRATION_STEPS = 8
"""Rate corrections tried at most; each regenerates the trace."""
CALIBRATION_TOLERANCE = 0.005
"""Offered load this close to the wanted one is close enough (half a point of capacity)."""


def offered_device_s(job: TraceJob, *, horizon_s: float) -> float:
    """Device-seconds the job asks for before the horizon: its GPU-equivalents for its run
    (until it ends, is stopped at `maxRuntime`, or the horizon comes)."""
    remaining = max(horizon_s - job.arrival_s, 0.0)
    run = remaining if job.run_s is None else min(job.run_s, remaining)
    return job.gpus * run


def offered_load(trace: Trace) -> float:
    """Offered device-time over the trace's length / (capacity x horizon)."""
    asked = sum(offered_device_s(job, horizon_s=trace.horizon_s) for job in trace.jobs)
    return asked / (trace.cluster.capacity * trace.horizon_s)


def _fixed_load(trace: Trace) -> float:
    """The part of the offered load a rate does not scale: prod serving."""
    asked = sum(
        offered_device_s(job, horizon_s=trace.horizon_s)
        for job in trace.jobs
        if job.tier == "prod-inference"
    )
    return asked / (trace.cluster.capacity * trace.horizon_s)


def at_load(generate: Callable[[float], Trace], load: float) -> Trace:
    """The trace `generate(rate)` whose offered load is nearest `load`: the rate is corrected
    by the ratio of wanted to offered scalable load until they agree within the tolerance.
    Each correction redraws the trace, so the offered load moves with the draws; the nearest
    trace found is kept."""
    rate = 1.0
    best: Trace | None = None
    best_error = float("inf")
    for _ in range(CALIBRATION_STEPS):
        trace = generate(rate)
        offered = offered_load(trace)
        error = abs(offered - load)
        if error < best_error:
            best, best_error = trace, error
        if error <= CALIBRATION_TOLERANCE:
            break
        fixed = _fixed_load(trace)
        scalable = offered - fixed
        if scalable <= 0 or load <= fixed:
            break
        rate *= (load - fixed) / scalable
    assert best is not None
    return best
