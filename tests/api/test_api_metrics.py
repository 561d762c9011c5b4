"""The metrics registry: PRODUCT §8 names, bounded labels, whole replacement of state gauges."""

from __future__ import annotations

from gangq.queue import metrics


def value(registry: metrics.Metrics, name: str, **labels: str) -> float | None:
    return registry.registry.get_sample_value(name, labels)


def test_every_product_metric_is_registered() -> None:
    names = metrics.series_names(metrics.create_metrics())
    assert {
        "gangq_queue_pending_jobs",
        "gangq_queue_unschedulable_jobs",
        "gangq_admission_wait_seconds_bucket",
        "gangq_devices",
        "gangq_tenant_devices",
        "gangq_preemptions_total",
        "gangq_scheduling_cycle_seconds_bucket",
        "gangq_release_skew_seconds_bucket",
        "gangq_gang_start_failures_total",
        "gangq_largest_placeable_gang",
    } <= names


def test_registries_are_independent() -> None:
    first, second = metrics.create_metrics(), metrics.create_metrics()
    metrics.observe_cycle(first, 0.02)
    assert value(first, "gangq_scheduling_cycle_seconds_count") == 1
    assert value(second, "gangq_scheduling_cycle_seconds_count") == 0


def test_queue_gauges_are_replaced_whole() -> None:
    registry = metrics.create_metrics()
    metrics.set_queue(
        registry,
        {("training", "ml"): 3, ("small", "ci"): 1},
        unschedulable={("small", "ci"): 2},
        oldest_pending_seconds={"training": 60},
    )
    metrics.set_queue(
        registry, {("training", "ml"): 2}, unschedulable={}, oldest_pending_seconds={}
    )
    assert value(registry, "gangq_queue_pending_jobs", tier="training", tenant="ml") == 2
    assert value(registry, "gangq_queue_pending_jobs", tier="small", tenant="ci") is None
    assert value(registry, "gangq_queue_unschedulable_jobs", tier="small", tenant="ci") is None
    assert value(registry, "gangq_queue_oldest_pending_seconds", tier="training") is None


def test_admission_waits_from_seconds_to_days() -> None:
    registry = metrics.create_metrics()
    for wait in (0.5, 90, 3 * 86400):
        metrics.record_admission(registry, "training", wait_seconds=wait)
    bucket = "gangq_admission_wait_seconds_bucket"
    assert value(registry, bucket, tier="training", le="1.0") == 1
    assert value(registry, bucket, tier="training", le="120.0") == 2
    assert value(registry, bucket, tier="training", le="86400.0") == 2
    assert value(registry, bucket, tier="training", le="604800.0") == 3
    assert value(registry, "gangq_admissions_total", tier="training") == 3


def test_free_text_reasons_fold_into_a_bounded_set() -> None:
    registry = metrics.create_metrics()
    metrics.record_preemption(registry, "small", reason="priority")
    metrics.record_preemption(registry, "small", reason="preempted by ml/x at 12:00")
    metrics.record_gang_start_failure(registry, "training", reason="image pull took 20m")
    assert value(registry, "gangq_preemptions_total", victim_tier="small", reason="priority") == 1
    assert value(registry, "gangq_preemptions_total", victim_tier="small", reason="other") == 1
    assert value(registry, "gangq_gang_start_failures_total", tier="training", reason="other") == 1


def test_device_and_tenant_gauges() -> None:
    registry = metrics.create_metrics()
    metrics.set_devices(registry, "gpu.nvidia.com", free=10, reserved=50, held_by_others=4)
    metrics.set_tenant_devices(registry, {("ml", "gpu.nvidia.com"): (32, 8)})
    metrics.set_largest_placeable_gang(registry, "gpu.nvidia.com", devices=8)
    assert (
        value(registry, "gangq_devices", device_class="gpu.nvidia.com", state="held_by_others") == 4
    )
    assert (
        value(
            registry,
            "gangq_tenant_devices",
            tenant="ml",
            device_class="gpu.nvidia.com",
            kind="borrowed",
        )
        == 8
    )
    assert value(registry, "gangq_largest_placeable_gang", device_class="gpu.nvidia.com") == 8


def test_losing_leadership_drops_the_leaders_gauges() -> None:
    registry = metrics.create_metrics()
    metrics.set_leader(registry, is_leader=True)
    metrics.set_queue(
        registry,
        {("training", "ml"): 3},
        unschedulable={("training", "ml"): 1},
        oldest_pending_seconds={"training": 5},
    )
    metrics.set_devices(registry, "gpu.nvidia.com", free=1, reserved=2, held_by_others=0)
    metrics.set_leader(registry, is_leader=False)
    assert value(registry, "gangq_leader") == 0
    assert value(registry, "gangq_queue_pending_jobs", tier="training", tenant="ml") is None
    assert value(registry, "gangq_queue_unschedulable_jobs", tier="training", tenant="ml") is None
    assert value(registry, "gangq_devices", device_class="gpu.nvidia.com", state="free") is None


def test_exposition_is_prometheus_text() -> None:
    registry = metrics.create_metrics()
    metrics.observe_release_skew(registry, 0.004)
    metrics.set_database_up(registry, is_up=True)
    text = metrics.exposition(registry).decode()
    assert 'gangq_release_skew_seconds_bucket{le="0.005"} 1.0' in text
    assert "gangq_database_up 1.0" in text
