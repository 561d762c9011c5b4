"""Figures of a simulation run: utilization against an offline bound, waits, partial starts,
preemptions and starvation, as a JSON-ready mapping and as a table.

Owns the definitions of every reported figure (docs/sim.md explains how to read them). Pure
arithmetic over an `Outcome`; it runs nothing and prints nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangq.queue.core.explain import WaitCause
from gangq.queue.core.model import DEFAULT_TIERS
from gangq.queue.sim.outcome import JobRecord, Outcome, Timeline
from gangq.queue.sim.trace import Trace

HOUR = 3600.0


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _integrals(timeline: Timeline, *, capacity: int) -> tuple[float, float, float, float]:
    """(allocated device-s, allocated device-s while demand >= capacity, busy s, partial device-s)
    of the step function the timeline samples."""
    allocated = busy_allocated = busy = partial = 0.0
    columns = list(timeline.allocated_by_tier.values())
    for i in range(len(timeline.times) - 1):
        span = timeline.times[i + 1] - timeline.times[i]
        held = sum(column[i] for column in columns)
        allocated += held * span
        partial += timeline.partial_held[i] * span
        if timeline.demand[i] >= capacity:
            busy += span
            busy_allocated += held * span
    return allocated, busy_allocated, busy, partial


def fluid_bound(trace: Trace) -> float:
    """The best utilization any policy could reach: every job's device-time poured into the
    cluster from its arrival as if devices were interchangeable and work divisible."""
    capacity = trace.cluster.capacity
    backlog = done = 0.0
    clock = 0.0
    for job in trace.jobs:
        if job.arrival_s > trace.horizon_s:
            break
        served = min(backlog, capacity * (job.arrival_s - clock))
        done, backlog, clock = done + served, backlog - served, job.arrival_s
        run_s = job.run_s if job.run_s is not None else trace.horizon_s
        backlog += job.gpus * min(run_s, trace.horizon_s - job.arrival_s)
    done += min(backlog, capacity * (trace.horizon_s - clock))
    return done / (capacity * trace.horizon_s)


def _wait_stats(waits: Iterable[float]) -> dict[str, float | int | None]:
    values = sorted(waits)
    return {
        "count": len(values),
        "p50": percentile(values, 0.50),
        "p95": percentile(values, 0.95),
        "max": values[-1] if values else None,
    }


def _arrived(outcome: Outcome) -> list[JobRecord]:
    horizon = outcome.trace.horizon_s
    return [r for r in outcome.records.values() if r.job.arrival_s <= horizon]


def _grouped(records: Iterable[JobRecord], key: str) -> dict[str, dict[str, float | int | None]]:
    groups: dict[str, list[float]] = {}
    for record in records:
        name = record.job.tier if key == "tier" else record.job.shape
        groups.setdefault(name, []).append(record.waited_s)
    return {name: _wait_stats(groups[name]) for name in sorted(groups)}


def _by_tenant(records: Iterable[JobRecord]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Wait figures per tenant and tier: who pays for a policy's choices."""
    tenants: dict[str, list[JobRecord]] = {}
    for record in records:
        tenants.setdefault(record.job.tenant, []).append(record)
    return {tenant: _grouped(tenants[tenant], "tier") for tenant in sorted(tenants)}


def _by_cause(records: Iterable[JobRecord]) -> dict[str, dict[str, float]]:
    """Hours waited per tier and cause (explain.WaitCause), most first: which rule the waits
    of a week come from (a tenant's own limit, capacity, reclaim patience, ...)."""
    tiers: dict[str, dict[str, float]] = {}
    for record in records:
        by_cause = tiers.setdefault(record.job.tier, {})
        for cause, seconds in record.waited_by_cause.items():
            by_cause[cause] = by_cause.get(cause, 0.0) + seconds / HOUR
    return {
        tier: dict(sorted(tiers[tier].items(), key=lambda item: (-item[1], item[0])))
        for tier in sorted(tiers)
    }


def _started_or(record: JobRecord, horizon: float) -> float:
    return record.first_started_at if record.first_started_at is not None else horizon


def _slip(records: Iterable[JobRecord], *, horizon: float) -> float | None:
    """Longest delay of a start past the first reservation the policy promised (rule 5); 0
    when every reserved job started on time or early."""
    slips = [
        max(0.0, _started_or(record, horizon) - record.promised_start)
        for record in records
        if record.promised_start is not None
    ]
    return max(slips, default=None)


def _water_fill(
    capacity: float, demands: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Max-min fair shares by weight: each tenant gets capacity in proportion to its weight,
    never more than its demand; what a satisfied tenant leaves goes to the others."""
    shares = {tenant: 0.0 for tenant in demands}
    active = {tenant for tenant, demand in demands.items() if demand > 0}
    left = capacity
    while active and left > 1e-9:
        total = sum(weights[t] for t in active)
        offer = {t: left * weights[t] / total for t in active}
        satisfied = {t for t in active if demands[t] - shares[t] <= offer[t]}
        if not satisfied:
            for t in active:
                shares[t] += offer[t]
            break
        for t in satisfied:
            left -= demands[t] - shares[t]
            shares[t] = demands[t]
        active -= satisfied
    return shares


def fairness(outcome: Outcome) -> dict[str, Any]:
    """Jain's index over tenants of (device-time used / fair share while they had demand).

    A tenant's fair share at each instant is its max-min share of the capacity by weight,
    capped by its demand (devices held plus wanted by its waiting jobs) and its quota limit
    (`nominal + borrowingLimit`); 1.0 means every tenant got the same fraction of its share."""
    trace = outcome.trace
    timeline = outcome.timeline
    quotas = {str(q.tenant): q for q in trace.quotas}
    weights = {t: quotas[t].weight for t in quotas}
    limits = {t: float(quotas[t].nominal + quotas[t].borrowing_limit) for t in quotas}
    used = dict.fromkeys(quotas, 0.0)
    fair = dict.fromkeys(quotas, 0.0)
    held, wanted = timeline.held_by_tenant, timeline.wanted_by_tenant
    capacity = float(trace.cluster.capacity)
    for i in range(len(timeline.times) - 1):
        span = timeline.times[i + 1] - timeline.times[i]
        if span <= 0:
            continue
        demands = {
            t: min(limits[t], held.get(t, [0] * (i + 1))[i] + wanted.get(t, [0] * (i + 1))[i])
            for t in quotas
        }
        shares = _water_fill(capacity, demands, weights)
        for t in quotas:
            if demands[t] > 0:
                fair[t] += shares[t] * span
                used[t] += held.get(t, [0] * (i + 1))[i] * span
    ratios = {t: used[t] / fair[t] for t in quotas if fair[t] > 0}
    values = list(ratios.values())
    squares = sum(v * v for v in values)
    index = (sum(values) ** 2) / (len(values) * squares) if squares > 0 else None
    return {"jain": index, "share_ratio": ratios}


def _prediction_error(outcome: Outcome) -> float | None:
    """Median of |predicted - actual| / actual over runs that ended by themselves."""
    errors = sorted(abs(p - a) / a for p, a in outcome.predictions if a > 0)
    return percentile(errors, 0.5)


def _slips_by_cause(outcome: Outcome) -> dict[str, dict[str, float | int]]:
    return {
        cause: {
            "count": len(outcome.slips.get(cause, [])),
            "max_s": max(outcome.slips.get(cause, [0.0]), default=0.0),
            "total_s": sum(outcome.slips.get(cause, [])),
        }
        for cause in ("outlived", "arrival")
    }


def summarize(outcome: Outcome) -> dict[str, Any]:
    """The figures of one policy; the keys are documented in docs/sim.md."""
    trace = outcome.trace
    capacity = trace.cluster.capacity
    allocated, busy_allocated, busy, partial = _integrals(outcome.timeline, capacity=capacity)
    records = _arrived(outcome)
    gangs = [r for r in records if r.job.replicas > 1]
    waits_by_tier = _grouped(records, "tier")
    beyond_limit: dict[str, list[float]] = {}
    for record in records:
        own_limit = record.waited_by_cause.get(WaitCause.LIMIT, 0.0)
        beyond_limit.setdefault(record.job.tier, []).append(record.waited_s - own_limit)
    return {
        "utilization": allocated / (capacity * trace.horizon_s),
        "utilization_busy": busy_allocated / (capacity * busy) if busy > 0 else None,
        "utilization_bound": fluid_bound(trace),
        "utilization_useful": (allocated - partial - outcome.device_seconds_lost)
        / (capacity * trace.horizon_s),
        "busy_hours": busy / HOUR,
        "partial_starts": sum(1 for r in gangs if r.was_partial),
        "partial_idle_device_hours": partial / HOUR,
        "gang_start_failures": outcome.gang_start_failures,
        "deadlocks": outcome.deadlocks,
        "preemptions": outcome.evictions,
        "grows": outcome.grows,
        "shrinks": outcome.shrinks,
        "device_hours_lost": outcome.device_seconds_lost / HOUR,
        "device_hours_lost_by_cause": {
            cause: seconds / HOUR
            for cause, seconds in sorted(
                outcome.lost_by_cause.items(), key=lambda item: (-item[1], item[0])
            )
        },
        "lost_fraction": outcome.device_seconds_lost / (capacity * trace.horizon_s),
        "fairness": fairness(outcome),
        "prediction_error": _prediction_error(outcome),
        "reservation_slips": _slips_by_cause(outcome),
        "wait_p50_s": {tier: stats["p50"] for tier, stats in waits_by_tier.items()},
        "wait_p95_s": {tier: stats["p95"] for tier, stats in waits_by_tier.items()},
        "wait_max_s": {tier: stats["max"] for tier, stats in waits_by_tier.items()},
        "wait_p95_beyond_limit_s": {
            tier: percentile(waits, 0.95) for tier, waits in sorted(beyond_limit.items())
        },
        "wait_by_gang_size_s": _grouped(records, "shape"),
        "wait_by_tenant_s": _by_tenant(records),
        "wait_by_cause_h": _by_cause(records),
        "max_gang_wait_s": max((r.waited_s for r in gangs), default=None),
        "max_reservation_slip_s": _slip(records, horizon=trace.horizon_s),
        "jobs": len(records),
        "never_started": sum(1 for r in records if r.first_started_at is None),
        "finished": sum(1 for r in records if r.finished_at is not None),
        "slice_jobs": sum(1 for r in records if r.job.slice is not None),
        "counter_overcommits": outcome.counter_overcommits,
        **_largest_gang(outcome.timeline, horizon=trace.horizon_s),
        "cycles": outcome.cycles,
        "wall_s": outcome.wall_s,
    }


def _largest_gang(timeline: Timeline, *, horizon: float) -> dict[str, float | int | None]:
    """The largest gang of whole-node replicas placeable over time: its time-weighted mean and
    its minimum (devices), so small work that breaks whole nodes shows."""
    sizes = timeline.largest_gang
    if not sizes:
        return {"largest_gang_mean": None, "largest_gang_min": None}
    ends = [*timeline.times[1:], max(horizon, timeline.times[-1])]
    spans = [end - start for start, end in zip(timeline.times, ends, strict=True)]
    total = sum(spans)
    mean = sum(s * w for s, w in zip(sizes, spans, strict=True)) / total if total > 0 else None
    return {"largest_gang_mean": mean, "largest_gang_min": min(sizes)}


def _largest(summary: Mapping[str, Any]) -> str:
    mean, low = summary["largest_gang_mean"], summary["largest_gang_min"]
    return "-" if mean is None else f"{mean:.1f} / {low}"


def _hours(seconds: Any) -> str:
    return "-" if seconds is None else f"{seconds / HOUR:.2f}h"


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    tiers = [t.name for t in DEFAULT_TIERS if t.name in summary["wait_p95_s"]]
    rows = [
        ("utilization", _percent(summary["utilization"])),
        ("utilization while demand >= capacity", _percent(summary["utilization_busy"])),
        ("offline upper bound", _percent(summary["utilization_bound"])),
        ("useful utilization (no idle or lost work)", _percent(summary["utilization_useful"])),
        ("partial gang starts", str(summary["partial_starts"])),
        ("device-hours idle in partial gangs", f"{summary['partial_idle_device_hours']:.1f}"),
        ("deadlocks (gangs blocking each other)", str(summary["deadlocks"])),
        ("preemptions (gangs evicted)", str(summary["preemptions"])),
        ("elastic gangs grown / shrunk", f"{summary['grows']} / {summary['shrinks']}"),
        ("device-hours lost to preemption and resizes", f"{summary['device_hours_lost']:.1f}"),
        *(
            (f"device-hours lost: {cause}", f"{hours:.1f}")
            for cause, hours in summary["device_hours_lost_by_cause"].items()
        ),
        ("lost fraction (lost / capacity)", _percent(summary["lost_fraction"])),
        ("fairness (Jain, tenants' share ratios)", _ratio(summary["fairness"]["jain"])),
        ("prediction error (median |p - a| / a)", _percent(summary["prediction_error"])),
    ]
    for tier in tiers:
        rows.append(
            (
                f"wait p50 / p95 / max {tier}",
                " / ".join(
                    _hours(summary[key][tier]) for key in ("wait_p50_s", "wait_p95_s", "wait_max_s")
                ),
            )
        )
    for tier in tiers:
        rows.append(
            (
                f"wait p95 {tier} beyond its tenant's limit",
                _hours(summary["wait_p95_beyond_limit_s"][tier]),
            )
        )
    for shape, stats in summary["wait_by_gang_size_s"].items():
        rows.append((f"wait p95 gang {shape}", _hours(stats["p95"])))
    for tenant, by_tier in summary["wait_by_tenant_s"].items():
        for tier, stats in by_tier.items():
            rows.append((f"wait p95 {tenant} {tier}", _hours(stats["p95"])))
    for tier, by_cause in summary["wait_by_cause_h"].items():
        for cause, hours in by_cause.items():
            rows.append((f"hours waited {tier}: {cause}", f"{hours:.1f}"))
    rows += [
        ("longest gang wait", _hours(summary["max_gang_wait_s"])),
        ("longest start past reservation", _hours(summary["max_reservation_slip_s"])),
        *(
            (
                f"reservation slips: {cause}",
                f"{figures['count']} (max {_hours(figures['max_s'])})",
            )
            for cause, figures in summary["reservation_slips"].items()
        ),
        ("largest placeable gang, mean / min", _largest(summary)),
        (
            "slice jobs / counter over-commits",
            f"{summary['slice_jobs']} / {summary['counter_overcommits']}",
        ),
        ("jobs never started", str(summary["never_started"])),
        ("cycles", str(summary["cycles"])),
        ("wall time", f"{summary['wall_s']:.1f}s"),
    ]
    return rows


def table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One column per policy, one row per figure, aligned for a terminal."""
    names = list(summaries)
    per_policy = [dict(_rows(summaries[name])) for name in names]
    labels = [label for label, _ in _rows(summaries[names[0]])]
    for rows in per_policy[1:]:
        labels += [label for label in rows if label not in labels]
    width = max(len(label) for label in labels)
    columns = [
        max([len(name), *(len(rows.get(label, "-")) for label in labels)])
        for name, rows in zip(names, per_policy, strict=True)
    ]
    lines = [
        " " * width + "".join(f"  {name:>{w}}" for name, w in zip(names, columns, strict=True))
    ]
    for label in labels:
        cells = "".join(
            f"  {rows.get(label, '-'):>{w}}" for rows, w in zip(per_policy, columns, strict=True)
        )
        lines.append(f"{label:<{width}}{cells}")
    return "\n".join(lines)


def worst(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The worst of several runs of one policy, figure by figure (lowest utilization and
    fairness, highest waits, losses and partial starts): what the goals must hold against."""
    tiers = sorted({tier for s in summaries for tier in s["wait_p95_s"]})

    def highest(values: Iterable[Any]) -> Any:
        present = [v for v in values if v is not None]
        return max(present, default=None)

    def lowest(values: Iterable[Any]) -> Any:
        present = [v for v in values if v is not None]
        return min(present, default=None)

    return {
        "utilization_useful": lowest(s["utilization_useful"] for s in summaries),
        "lost_fraction": highest(s["lost_fraction"] for s in summaries),
        "partial_starts": highest(s["partial_starts"] for s in summaries),
        "fairness_jain": lowest(s["fairness"]["jain"] for s in summaries),
        "prediction_error": highest(s["prediction_error"] for s in summaries),
        "wait_p95_s": {
            tier: highest(s["wait_p95_s"].get(tier) for s in summaries) for tier in tiers
        },
        "wait_p95_beyond_limit_s": {
            tier: highest(s["wait_p95_beyond_limit_s"].get(tier) for s in summaries)
            for tier in tiers
        },
    }


SEED_COLUMNS = (
    "useful",
    "lost",
    "prod p95",
    "training p95",
    "small p95",
    "small p95 beyond limit",
    "partial",
    "jain",
)


def _seed_cells(
    *,
    useful: Any,
    lost: Any,
    waits: Mapping[str, Any],
    beyond_limit: Mapping[str, Any],
    partial: Any,
    jain: Any,
) -> list[str]:
    return [
        _percent(useful),
        _percent(lost),
        _hours(waits.get("prod-inference")),
        _hours(waits.get("training")),
        _hours(waits.get("small")),
        _hours(beyond_limit.get("small")),
        str(partial),
        _ratio(jain),
    ]


def seeds_table(
    by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]],
    *,
    worst: Mapping[str, Mapping[str, Any]],
) -> str:
    """One row per seed and policy with the goal figures, then each policy's worst row."""
    rows: list[list[str]] = [["seed", "policy", *SEED_COLUMNS]]
    for seed, policies in by_seed.items():
        for name, s in policies.items():
            rows.append(
                [
                    str(seed),
                    name,
                    *_seed_cells(
                        useful=s["utilization_useful"],
                        lost=s["lost_fraction"],
                        waits=s["wait_p95_s"],
                        beyond_limit=s["wait_p95_beyond_limit_s"],
                        partial=s["partial_starts"],
                        jain=s["fairness"]["jain"],
                    ),
                ]
            )
    for name, w in worst.items():
        rows.append(
            [
                "worst",
                name,
                *_seed_cells(
                    useful=w["utilization_useful"],
                    lost=w["lost_fraction"],
                    waits=w["wait_p95_s"],
                    beyond_limit=w["wait_p95_beyond_limit_s"],
                    partial=w["partial_starts"],
                    jain=w["fairness_jain"],
                ),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )
