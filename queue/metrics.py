"""The Prometheus metrics of gangq: one registry per process and plain-value update functions.

Owns metric names, label sets and histogram buckets (PRODUCT §8). Label values are tiers,
tenants and device classes, all bounded by configuration; free-text values (preemption reasons)
are folded into a fixed set so no series can grow without bound. It must not compute anything:
the controller and the API hand in finished numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Waits range from seconds (small jobs on an idle cluster) to days (a big gang behind prod).
ADMISSION_WAIT_BUCKETS = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    7200.0, 14400.0, 28800.0, 86400.0, 172800.0, 604800.0,
)  # fmt: skip
# One cycle over a large queue is milliseconds to seconds.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Release skew of a gang: milliseconds when healthy, seconds when the API server struggles.
RELEASE_SKEW_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

DEVICE_STATES = ("free", "reserved", "held_by_others")
TENANT_DEVICE_KINDS = ("nominal", "borrowed")
PREEMPTION_REASONS = ("priority", "reclaim", "scale_up", "other")
START_FAILURE_REASONS = ("timeout", "pod_failed", "node_lost", "other")
RESIZE_OUTCOMES = ("grown", "grow_undone", "shrunk")
API_RETRY_REASONS = ("conflict", "throttled", "server_error", "unreachable", "other")
API_ERROR_CODES = ("400", "401", "403", "422")
API_RESOURCES = (
    "trainingjobs", "pods", "services", "resourceclaims", "resourceslices", "deviceclasses",
    "nodes", "namespaces", "events", "leases", "tokenreviews",
)  # fmt: skip
"""The resources gangq talks to; any other request path counts as "other"."""


@dataclass(frozen=True, slots=True)
class Metrics:
    """Every gangq metric, registered in `registry` (never the process-global default one)."""

    registry: CollectorRegistry
    queue_pending_jobs: Gauge
    queue_unschedulable_jobs: Gauge
    queue_oldest_pending_seconds: Gauge
    admission_wait_seconds: Histogram
    admissions: Counter
    devices: Gauge
    tenant_devices: Gauge
    preemptions: Counter
    scheduling_cycle_seconds: Histogram
    release_skew_seconds: Histogram
    gang_start_failures: Counter
    resizes: Counter
    largest_placeable_gang: Gauge
    leader: Gauge
    database_up: Gauge
    api_retries: Counter
    api_errors: Counter
    recovery_actions: Counter


def create_metrics() -> Metrics:
    """A fresh registry, so that tests and several apps in one process never share series."""
    registry = CollectorRegistry(auto_describe=True)
    return Metrics(
        registry=registry,
        queue_pending_jobs=Gauge(
            "gangq_queue_pending_jobs",
            "Jobs waiting for admission.",
            ["tier", "tenant"],
            registry=registry,
        ),
        queue_unschedulable_jobs=Gauge(
            "gangq_queue_unschedulable_jobs",
            "Queued jobs the cluster as configured can never run (Schedulable=False NeverFits); "
            "not counted as pending.",
            ["tier", "tenant"],
            registry=registry,
        ),
        queue_oldest_pending_seconds=Gauge(
            "gangq_queue_oldest_pending_seconds",
            "Age of the oldest pending job per tier (0 when none is pending).",
            ["tier"],
            registry=registry,
        ),
        admission_wait_seconds=Histogram(
            "gangq_admission_wait_seconds",
            "Time from submission to admission.",
            ["tier"],
            buckets=ADMISSION_WAIT_BUCKETS,
            registry=registry,
        ),
        admissions=Counter(
            "gangq_admissions",
            "Gangs admitted (every replica reserved).",
            ["tier"],
            registry=registry,
        ),
        devices=Gauge(
            "gangq_devices",
            "Devices of a managed class by state, in GPU-equivalents (a partition its share).",
            ["device_class", "state"],
            registry=registry,
        ),
        tenant_devices=Gauge(
            "gangq_tenant_devices",
            "GPU-equivalents a tenant uses within its nominal quota and borrowed above it.",
            ["tenant", "device_class", "kind"],
            registry=registry,
        ),
        preemptions=Counter(
            "gangq_preemptions",
            "Gangs evicted to make room for another job.",
            ["victim_tier", "reason"],
            registry=registry,
        ),
        scheduling_cycle_seconds=Histogram(
            "gangq_scheduling_cycle_seconds",
            "Duration of one scheduling cycle.",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        ),
        release_skew_seconds=Histogram(
            "gangq_release_skew_seconds",
            "Time between the first and the last pod of a gang being released.",
            buckets=RELEASE_SKEW_BUCKETS,
            registry=registry,
        ),
        gang_start_failures=Counter(
            "gangq_gang_start_failures",
            "Gangs torn down because they did not become Ready or lost a member while starting.",
            ["tier", "reason"],
            registry=registry,
        ),
        resizes=Counter(
            "gangq_elastic_resizes",
            "Resizes of running elastic gangs carried out: grown (the added replicas run), "
            "grow_undone (they did not come up) and shrunk (instead of an eviction).",
            ["tier", "outcome"],
            registry=registry,
        ),
        largest_placeable_gang=Gauge(
            "gangq_largest_placeable_gang",
            "Most devices one gang could get now (whole free nodes plus the best partial node).",
            ["device_class"],
            registry=registry,
        ),
        leader=Gauge(
            "gangq_leader",
            "1 while this replica holds leadership and runs the scheduling cycle.",
            registry=registry,
        ),
        database_up=Gauge(
            "gangq_database_up",
            "1 when the last PostgreSQL round trip of this replica succeeded.",
            registry=registry,
        ),
        api_retries=Counter(
            "gangq_api_retries",
            "Kubernetes API requests that met an expected race or transient failure and were "
            "tried again (conflicts are re-read and re-applied on the next step).",
            ["resource", "reason"],
            registry=registry,
        ),
        recovery_actions=Counter(
            "gangq_recovery_actions",
            "What a new leader did before its first cycle so that the database agrees with the "
            "cluster: gangs adopted, partial gangs torn down, reservations without claims "
            "released, jobs finished as their TrainingJob shows (after a failover that lost "
            "commits, a restore or an empty database).",
            ["action"],
            registry=registry,
        ),
        api_errors=Counter(
            "gangq_api_errors",
            "Kubernetes API requests refused for a fault of gangq's own (a missing permission, "
            "refused credentials, a field gangq sets): the controller needs fixing, no job does.",
            ["resource", "code"],
            registry=registry,
        ),
    )


def set_queue(
    metrics: Metrics,
    pending: Mapping[tuple[str, str], int],
    *,
    unschedulable: Mapping[tuple[str, str], int],
    oldest_pending_seconds: Mapping[str, float],
) -> None:
    """Replace the queue gauges whole, so a tenant or tier that left the queue leaves no series.

    Both counts are keyed by (tier, tenant); a never-fit job waits for nothing, so it is in
    `unschedulable` only and never in the oldest pending age (which alerts on a stuck queue).
    """
    for gauge, counts in (
        (metrics.queue_pending_jobs, pending),
        (metrics.queue_unschedulable_jobs, unschedulable),
    ):
        gauge.clear()
        for (tier, tenant), count in counts.items():
            gauge.labels(tier=tier, tenant=tenant).set(count)
    metrics.queue_oldest_pending_seconds.clear()
    for tier, seconds in oldest_pending_seconds.items():
        metrics.queue_oldest_pending_seconds.labels(tier=tier).set(seconds)


def record_admission(metrics: Metrics, tier: str, *, wait_seconds: float) -> None:
    metrics.admissions.labels(tier=tier).inc()
    metrics.admission_wait_seconds.labels(tier=tier).observe(max(wait_seconds, 0.0))


def set_devices(
    metrics: Metrics, device_class: str, *, free: float, reserved: float, held_by_others: float
) -> None:
    for state, count in zip(DEVICE_STATES, (free, reserved, held_by_others), strict=True):
        metrics.devices.labels(device_class=device_class, state=state).set(count)


def set_tenant_devices(
    metrics: Metrics, usage: Mapping[tuple[str, str], tuple[float, float]]
) -> None:
    """`usage` maps (tenant, device class) to (GPU-equivalents within nominal, borrowed)."""
    metrics.tenant_devices.clear()
    for (tenant, device_class), counts in usage.items():
        for kind, count in zip(TENANT_DEVICE_KINDS, counts, strict=True):
            metrics.tenant_devices.labels(tenant=tenant, device_class=device_class, kind=kind).set(
                count
            )


def record_preemption(metrics: Metrics, victim_tier: str, *, reason: str) -> None:
    bounded = reason if reason in PREEMPTION_REASONS else "other"
    metrics.preemptions.labels(victim_tier=victim_tier, reason=bounded).inc()


def record_gang_start_failure(metrics: Metrics, tier: str, *, reason: str) -> None:
    bounded = reason if reason in START_FAILURE_REASONS else "other"
    metrics.gang_start_failures.labels(tier=tier, reason=bounded).inc()


def record_resize(metrics: Metrics, tier: str, *, outcome: str) -> None:
    metrics.resizes.labels(
        tier=tier, outcome=outcome if outcome in RESIZE_OUTCOMES else "other"
    ).inc()


def record_recovery_action(metrics: Metrics, *, action: str) -> None:
    metrics.recovery_actions.labels(action=action).inc()


def record_api_retry(metrics: Metrics, *, resource: str, reason: str) -> None:
    metrics.api_retries.labels(
        resource=resource if resource in API_RESOURCES else "other",
        reason=reason if reason in API_RETRY_REASONS else "other",
    ).inc()


def record_api_error(metrics: Metrics, *, resource: str, code: int) -> None:
    metrics.api_errors.labels(
        resource=resource if resource in API_RESOURCES else "other",
        code=str(code) if str(code) in API_ERROR_CODES else "other",
    ).inc()


def observe_cycle(metrics: Metrics, seconds: float) -> None:
    metrics.scheduling_cycle_seconds.observe(seconds)


def observe_release_skew(metrics: Metrics, seconds: float) -> None:
    metrics.release_skew_seconds.observe(max(seconds, 0.0))


def set_largest_placeable_gang(metrics: Metrics, device_class: str, *, devices: float) -> None:
    metrics.largest_placeable_gang.labels(device_class=device_class).set(devices)


def set_leader(metrics: Metrics, *, is_leader: bool) -> None:
    """A replica that stops leading drops the cluster-wide gauges only the leader keeps current.

    Otherwise a former leader would go on exporting a stale queue next to the new leader's,
    and every `sum` on a dashboard would count the queue twice.
    """
    metrics.leader.set(1 if is_leader else 0)
    if not is_leader:
        for gauge in (
            metrics.queue_pending_jobs,
            metrics.queue_unschedulable_jobs,
            metrics.queue_oldest_pending_seconds,
            metrics.devices,
            metrics.tenant_devices,
            metrics.largest_placeable_gang,
        ):
            gauge.clear()


def set_database_up(metrics: Metrics, *, is_up: bool) -> None:
    metrics.database_up.set(1 if is_up else 0)


def exposition(metrics: Metrics) -> bytes:
    """The text format Prometheus scrapes from `/metrics`."""
    return generate_latest(metrics.registry)


def series_names(metrics: Metrics) -> frozenset[str]:
    """Every sample name a scrape can contain, so dashboards and alerts can be checked."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
    }
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.update(family.name + suffix for suffix in suffixes[family.type])
    return frozenset(names)
