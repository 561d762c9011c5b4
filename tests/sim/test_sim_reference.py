"""The reference trace: the three worlds on 8 x 8 H100 in 2 racks, reproducible by seed."""

from __future__ import annotations

from collections import Counter

from gangq.queue.core.model import Tenant
from gangq.queue.sim import cluster, reference


def test_the_same_seed_gives_the_same_trace_and_another_seed_does_not() -> None:
    assert reference.generate(seed=7, days=2) == reference.generate(seed=7, days=2)
    assert reference.generate(seed=7, days=2).jobs != reference.generate(seed=8, days=2).jobs


def test_the_week_holds_the_three_worlds() -> None:
    week = reference.generate(seed=1)
    assert week.horizon_s == 7 * reference.DAY
    shapes = Counter((job.tier, job.shape) for job in week.jobs)
    prod = [job for job in week.jobs if job.tier == "prod-inference"]
    assert prod[0].shape == "2x8" and prod[0].runtime_s is None and prod[0].arrival_s == 0
    assert shapes[("prod-inference", "1x8")] == 7, "one scale-up replica a day"
    assert shapes[("training", "4x8")] >= 5
    assert shapes[("training", "2x8")] >= 20
    assert shapes[("small", "1x1")] > 3000
    small = [job for job in week.jobs if job.tier == "small"]
    assert all(job.run_s is not None and job.run_s <= 1800 for job in small)
    assert all(job.arrival_s < week.horizon_s for job in week.jobs)


def test_tenant_quotas_cover_the_cluster_and_every_job_is_allowed() -> None:
    week = reference.generate(seed=1, days=1)
    assert sum(quota.nominal for quota in week.quotas) == week.cluster.capacity == 64
    by_tenant = {quota.tenant: quota for quota in week.quotas}
    for job in week.jobs:
        quota = by_tenant[Tenant(job.tenant)]
        assert job.tier in quota.allowed_tiers
        assert job.device_count <= quota.nominal + quota.borrowing_limit


def test_the_cluster_has_two_racks_of_four_nodes_with_two_numa_nodes_each() -> None:
    inventory = cluster.build_inventory(reference.CLUSTER)
    racks = Counter(node.labels[cluster.RACK_LABEL] for node in inventory.nodes.values())
    assert racks == {"rack-0": 4, "rack-1": 4}
    numa = Counter(
        (device.node, device.attributes[cluster.NUMA_ATTRIBUTE])
        for device in inventory.devices.values()
    )
    assert len(inventory.devices) == 64
    assert set(numa.values()) == {4}
