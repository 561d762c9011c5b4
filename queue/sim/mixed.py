"""A second generated week, shaped like public GPU-cluster traces, to check defaults on a mix
they were not tuned on.

Owns the generator only: five tenants with nominal 8 each on the reference cluster, Poisson
arrivals of gangs from 1x1 to 4x8, log-normal runtimes per job family, 15 % of runs failing
early, `maxRuntime` 1.2 to 3 times the real run, and checkpoints for most 8-device-and-up gangs.
The same seed and days give the same trace, job for job.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from gangq.queue.core.model import JobKey, Tenant, TenantQuota, Topology, TopologyMode
from gangq.queue.sim.cluster import RACK_LABEL
from gangq.queue.sim.reference import CLUSTER, DAY, HOUR
from gangq.queue.sim.trace import Trace, TraceJob

TENANTS = ("vision", "speech", "nlp", "recsys", "robotics")
NOMINAL = 8
BORROWING_LIMIT = 32
MEAN_INTERVAL_S = 5400.0
"""Per tenant: about 70 % of the cluster's device-time is asked for over a week."""
SHAPES = ((1, 1, 0.40), (1, 2, 0.15), (1, 4, 0.15), (1, 8, 0.15), (2, 8, 0.10), (4, 8, 0.05))
"""(replicas, devices per replica, probability)."""
SMALL_MEDIAN_S = 10 * 60.0
TRAINING_MEDIAN_S = 2 * HOUR
FAMILY_SIGMA = 1.0
"""Spread of family medians around the tier median (log-normal)."""
RUN_SIGMA = 0.4
"""Spread of one family's runs around its median (log-normal)."""
FAMILIES = 3
EARLY_FAILURE = 0.15
CHECKPOINTING = 0.7
CHECKPOINT_INTERVAL_S = (30 * 60.0, 60 * 60.0)


def quotas() -> tuple[TenantQuota, ...]:
    return training_quotas(TENANTS, nominal=NOMINAL, borrowing_limit=BORROWING_LIMIT)


def training_quotas(
    tenants: tuple[str, ...], *, nominal: int, borrowing_limit: int
) -> tuple[TenantQuota, ...]:
    """Tenants that run training and small jobs on the reference cluster's GPUs, alike."""
    return tuple(
        TenantQuota(
            tenant=Tenant(name),
            device_class=CLUSTER.device_class,
            nominal=nominal,
            borrowing_limit=borrowing_limit,
            allowed_tiers=("training", "small"),
        )
        for name in tenants
    )


def _jobs(rng: random.Random, tenant: str, *, horizon: float) -> Iterator[TraceJob]:
    medians = {
        (replicas, per_replica, family): (
            SMALL_MEDIAN_S if replicas * per_replica <= 2 else TRAINING_MEDIAN_S
        )
        * math.exp(rng.gauss(0.0, FAMILY_SIGMA))
        for replicas, per_replica, _ in SHAPES
        for family in range(FAMILIES)
    }
    arrival = rng.expovariate(1 / MEAN_INTERVAL_S)
    index = 0
    while arrival < horizon:
        replicas, per_replica, _ = rng.choices(SHAPES, [p for _, _, p in SHAPES])[0]
        family = rng.randrange(FAMILIES)
        intended = medians[(replicas, per_replica, family)] * math.exp(rng.gauss(0.0, RUN_SIGMA))
        intended = max(60.0, round(intended))
        bound = math.ceil(intended * rng.uniform(1.2, 3.0))
        runtime = intended
        if rng.random() < EARLY_FAILURE:
            runtime = max(30.0, round(intended * rng.uniform(0.01, 0.2)))
        devices = replicas * per_replica
        checkpoint = None
        if devices >= 8 and rng.random() < CHECKPOINTING:
            checkpoint = round(rng.uniform(*CHECKPOINT_INTERVAL_S))
        topology = Topology()
        if replicas > 1:
            topology = Topology(RACK_LABEL, TopologyMode.PREFERRED)
        yield TraceJob(
            key=JobKey(f"{tenant}/job-{replicas}x{per_replica}-{index}"),
            arrival_s=round(arrival),
            tenant=Tenant(tenant),
            tier="small" if devices <= 2 else "training",
            replicas=replicas,
            devices_per_replica=per_replica,
            runtime_s=runtime,
            max_runtime_s=bound,
            topology=topology,
            checkpoint_interval_s=checkpoint,
            family=f"{replicas}x{per_replica}-{'abc'[family]}",
        )
        index += 1
        arrival += rng.expovariate(1 / MEAN_INTERVAL_S)


def generate(*, seed: int | str, days: int = 7) -> Trace:
    """The mixed week over `days` simulated days; jobs sorted by arrival."""
    horizon = days * DAY
    rng = random.Random(f"mixed-{seed}")
    jobs = [job for tenant in TENANTS for job in _jobs(rng, tenant, horizon=horizon)]
    jobs.sort(key=lambda job: (job.arrival_s, job.key))
    return Trace(cluster=CLUSTER, quotas=quotas(), jobs=tuple(jobs), horizon_s=horizon)
