"""The trace families: each matches the statistics docs/sim.md cites for it, reaches the load
asked for, and runs on the reference cluster within its tenants' quotas."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from collections import Counter

import pytest

from gangq.queue.core.model import Tenant
from gangq.queue.sim import families, load, scenarios, trace
from gangq.queue.sim.reference import DAY, HOUR

SEEDS = (1, 2, 3)
SAMPLE = 3000
"""Jobs drawn per seed: enough for shares within a few points."""
FAMILIES = list(families.FAMILIES.values())
WEEK_TOLERANCE = 0.025
"""The reference and mixed weeks reach a load to within one gang's device-time."""


def _drawn(family: families.Family) -> list[families.Drawn]:
    return [d for seed in SEEDS for d in families.sample(family, seed=seed, count=SAMPLE)]


def _runs(drawn: list[families.Drawn]) -> list[float]:
    return sorted(d.job.runtime_s for d in drawn if d.job.runtime_s is not None)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_share_of_one_gpu_jobs_and_of_failures_are_the_cited_ones(
    family: families.Family,
) -> None:
    drawn = _drawn(family)
    shares = dict(family.gpus)
    one_gpu = sum(1 for d in drawn if d.job.device_count == 1) / len(drawn)
    assert one_gpu == pytest.approx(shares[1], abs=0.02)
    outcomes = Counter(d.outcome for d in drawn)
    for outcome, share in zip(("finished", "failed", "cancelled"), family.outcomes, strict=True):
        assert outcomes[outcome] / len(drawn) == pytest.approx(share, abs=0.02)
    for d in drawn:
        job = d.job
        assert job.runtime_s is not None and job.max_runtime_s is not None
        if d.outcome == "finished":
            assert 1.2 * job.runtime_s <= job.max_runtime_s <= 3 * job.runtime_s + 1
        else:
            assert job.max_runtime_s >= 1.2 * job.runtime_s, "it stopped before its bound"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_runtimes_have_the_cited_median_a_heavy_tail_and_grow_with_job_size(
    family: families.Family,
) -> None:
    drawn = _drawn(family)
    runs = _runs(drawn)
    median = statistics.median(runs)
    p99 = runs[int(0.99 * len(runs))]
    assert family.median_s / 1.5 <= median <= family.median_s * 1.5
    assert p99 > 30 * median, "heavy-tailed: minutes at the median, hours to days at p99"
    assert max(runs) <= family.max_s
    one = statistics.median(d.job.runtime_s or 0 for d in drawn if d.job.device_count == 1)
    big = statistics.median(d.job.runtime_s or 0 for d in drawn if d.job.device_count >= 8)
    assert big > one, "bigger jobs run longer"


def test_the_families_medians_rank_as_the_traces_do() -> None:
    by_median = sorted(FAMILIES, key=lambda f: statistics.median(_runs(_drawn(f))))
    assert [f.name for f in by_median] == [
        f.name for f in sorted(FAMILIES, key=lambda f: f.median_s)
    ]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_arrivals_peak_at_the_cited_hours_and_dip_on_the_weekend(
    family: families.Family,
) -> None:
    drawn = _drawn(family)
    hours = Counter(int(d.job.arrival_s % DAY // HOUR) for d in drawn)
    peak = max(hours, key=lambda hour: hours[hour])
    trough = min(hours, key=lambda hour: hours[hour])
    assert family.hourly[peak] >= 0.9 * max(family.hourly)
    assert family.hourly[trough] <= 1.15 * min(family.hourly)
    days = Counter(int(d.job.arrival_s // DAY) for d in drawn)
    assert days[5] < days[2] and days[6] < days[2], "Saturday and Sunday below Wednesday"


@pytest.mark.parametrize("name", scenarios.NAMES)
@pytest.mark.parametrize("offered", [0.6, 0.9, 1.15])
def test_a_generated_trace_offers_the_load_asked_for(name: str, offered: float) -> None:
    trace = scenarios.generate(name, seed=2, days=7, offered=offered)
    tolerance = families.LOAD_TOLERANCE if name in families.FAMILIES else WEEK_TOLERANCE
    assert load.offered_load(trace) == pytest.approx(offered, abs=tolerance)


def test_a_heavier_load_is_more_of_the_same_jobs() -> None:
    light = families.generate(families.HELIOS, seed=4, load=0.6)
    heavy = families.generate(families.HELIOS, seed=4, load=1.2)
    assert len(heavy.jobs) > len(light.jobs)
    drawn = {job.key: job for job in heavy.jobs}
    assert sum(job.key in drawn for job in light.jobs) >= 0.9 * len(light.jobs)
    assert all(job == drawn[job.key] for job in light.jobs if job.key in drawn), "elastic alike"


@pytest.mark.parametrize("family", [families.HELIOS, families.ACME], ids=lambda f: f.name)
def test_a_share_of_multi_replica_training_jobs_is_elastic_down_to_half(
    family: families.Family,
) -> None:
    drawn = [d.job for d in _drawn(family)]
    gangs = [job for job in drawn if job.replicas > 1 and job.tier == "training"]
    elastic = [job for job in gangs if job.min_replicas is not None]
    assert len(elastic) / len(gangs) == pytest.approx(families.ELASTIC_SHARE, abs=0.05)
    assert all(job.min_replicas == math.ceil(job.replicas / 2) for job in elastic)
    assert all(job.min_replicas is None for job in drawn if job.replicas == 1)


def test_half_the_jobs_that_save_checkpoints_opt_in_to_be_asked_first() -> None:
    """Only a job that saves checkpoints can answer the request, so no other opts in."""
    drawn = [d.job for d in _drawn(families.ACME)]
    saving = [job for job in drawn if job.checkpoint_interval_s is not None]
    asked = [job for job in saving if job.checkpoint_grace_s is not None]
    assert len(asked) / len(saving) == pytest.approx(families.ASKED_FIRST_SHARE, abs=0.1)
    assert {job.checkpoint_grace_s for job in asked} == {families.ASKED_FIRST_GRACE_S}
    assert all(job.checkpoint_grace_s is None for job in drawn if job not in saving)


def _fingerprint(week: trace.Trace) -> str:
    """Of the week as it was before jobs were elastic or asked first."""
    rigid = week.without_elastic()
    plain = dataclasses.replace(
        rigid, jobs=tuple(dataclasses.replace(job, checkpoint_grace_s=None) for job in rigid.jobs)
    )
    document = json.dumps(trace.to_document(plain), sort_keys=True)
    return hashlib.sha256(document.encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("name", "seed", "offered", "fingerprint"),
    [
        ("reference", 1, None, "f014b686252c5314"),
        ("mixed", 2, None, "20bb7705fcad8630"),
        ("philly", 1, 0.9, "8dd5fa5dcee84a69"),
        ("helios", 2, 1.15, "1be6ff1acb1ac00d"),
        ("acme", 3, 1.15, "080927878e96a29f"),
    ],
)
def test_without_their_minimum_and_grace_the_weeks_are_those_generated_before_either(
    name: str, seed: int, offered: float | None, fingerprint: str
) -> None:
    """The fingerprints are of the weeks generated before any job was elastic or asked
    first: each draws from a stream of its own and changes no arrival, run, size or
    checkpoint."""
    week = scenarios.generate(name, seed=seed, days=7, offered=offered)
    assert _fingerprint(week) == fingerprint
    elastic = sum(job.min_replicas is not None for job in week.jobs)
    assert (elastic > 0) == (name in ("philly", "helios", "acme"))


def test_without_a_load_the_weeks_keep_theirs_and_a_family_offers_the_default() -> None:
    assert scenarios.generate("mixed", seed=1, days=2) == scenarios.generate(
        "mixed", seed=1, days=2, offered=None
    )
    philly = scenarios.generate("philly", seed=1, days=2)
    assert load.offered_load(philly) == pytest.approx(
        families.DEFAULT_LOAD, abs=families.LOAD_TOLERANCE
    )


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_week_fits_the_reference_cluster_and_its_tenants(family: families.Family) -> None:
    week = families.generate(family, seed=1, load=1.15)
    assert week == families.generate(family, seed=1, load=1.15)
    quotas = {quota.tenant: quota for quota in week.quotas}
    assert quotas[Tenant("prod")].nominal == 24 and quotas[Tenant("prod")].borrowing_limit == 0
    assert sum(quota.nominal for quota in week.quotas) == week.cluster.capacity == 64
    for job in week.jobs:
        quota = quotas[job.tenant]
        assert job.tier in quota.allowed_tiers
        assert job.device_count <= min(quota.nominal + quota.borrowing_limit, 48)
        assert job.devices_per_replica in (1, 2, 4, 8)
        assert 0 <= job.arrival_s < week.horizon_s
    checkpointing = sum(1 for job in week.jobs if job.checkpoint_interval_s is not None)
    assert checkpointing <= 0.05 * len(week.jobs), "most jobs never checkpoint"
